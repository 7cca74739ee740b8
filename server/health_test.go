package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// TestHealthService: the server answers the standard gRPC health service,
// for the whole server and each Watch service: NOT_SERVING while the store
// has no complete state, SERVING once it has, and an unknown service is
// NotFound.
func TestHealthService(t *testing.T) {
	store := cluster.NewStore()
	ts := serve(t, store, "unix", server.Options{}, server.ListenOptions{})
	conn, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()

	for _, name := range []string{"", "kpng.localv1.Watch", "kpng.globalv1.Watch"} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name}, grpc.WaitForReady(true))
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("Check(%q) before the store is synced: %v, %v; want NOT_SERVING", name, resp.GetStatus(), err)
		}
	}
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "kpng.globalv1.Watch"})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("first Watch status: %v, %v", resp.GetStatus(), err)
	}
	store.MarkSynced()
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch status after the store is synced: %v, %v; want SERVING", resp.GetStatus(), err)
	}
	for _, name := range []string{"", "kpng.localv1.Watch"} {
		if resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q): %v, %v; want SERVING", name, resp.GetStatus(), err)
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("Check of an unknown service: %v, want NotFound", err)
	}
}
