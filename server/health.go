package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
)

// healthServices are the names the health service answers for: the whole
// server ("") and each Watch service.
var healthServices = []string{"", localv1.Watch_ServiceDesc.ServiceName, globalv1.Watch_ServiceDesc.ServiceName}

// serveHealth registers the standard gRPC health service (grpc.health.v1)
// on g: every name in healthServices is NOT_SERVING until the store holds a
// complete state (before that a client would wait for its first batch),
// then SERVING until ctx ends.
func (s *Server) serveHealth(ctx context.Context, g grpc.ServiceRegistrar) {
	hs := health.NewServer()
	for _, name := range healthServices {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(g, hs)
	go func() {
		if _, err := s.store.Wait(ctx, 0); err != nil {
			return
		}
		for _, name := range healthServices {
			hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
		}
	}()
	context.AfterFunc(ctx, hs.Shutdown)
}
