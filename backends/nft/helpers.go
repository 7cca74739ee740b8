package nft

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/conntrack"
	"github.com/kpng/kpng/proxyutil/healthcheck"
	"github.com/kpng/kpng/proxyutil/metrics"
)

// startHelpers starts what kube-proxy runs beside its proxier: the metrics
// recorder and server, /healthz and /livez, the services' health-check
// listeners, and the stale UDP conntrack cleaners. It returns the driver
// hooks that feed them; the servers stop when ctx ends.
func (p *Plugin) startHelpers(ctx context.Context, families []localv1.IPFamily) (backend.Options, error) {
	cfg := &p.Config
	log := klog.FromContext(ctx)
	rec := metrics.NewRecorder(metrics.ModeNFTables, families...)
	onQueued := []func(*backend.State, backend.Changes){rec.OnQueued}
	onSync := []func(backend.SyncResult){rec.OnSync}
	var health healthcheck.HealthChecker
	if cfg.HealthzBindAddress != "" {
		hz := healthcheck.NewProxyHealthServer(cfg.HealthzBindAddress, 2*cfg.SyncPeriod, families...)
		ln, err := hz.Listen()
		if err != nil {
			return backend.Options{}, err
		}
		go func() {
			if err := hz.Serve(ctx, ln); err != nil {
				log.Error(err, "Health server stopped")
			}
		}()
		onQueued = append(onQueued, hz.OnQueued)
		onSync = append(onSync, hz.OnSync)
		health = hz
	}
	svc := healthcheck.NewServiceHealthServer(healthcheck.ServiceOptions{NodePortAddresses: cfg.NodePortAddresses, Proxy: health})
	context.AfterFunc(ctx, svc.Close)
	onSync = append(onSync, svc.OnSync)
	if cfg.MetricsBindAddress != "" {
		srv := &metrics.Server{Addr: cfg.MetricsBindAddress, ProxyMode: metrics.ModeNFTables}
		ln, err := srv.Listen()
		if err != nil {
			return backend.Options{}, err
		}
		go func() {
			if err := srv.Serve(ctx, ln); err != nil {
				log.Error(err, "Metrics server stopped")
			}
		}()
	}
	if !cfg.DryRun {
		for _, f := range families {
			onSync = append(onSync, conntrack.NewCleaner(f).OnSync)
		}
	}
	return backend.Options{
		MinSyncPeriod: cfg.MinSyncPeriod,
		ResyncPeriod:  cfg.SyncPeriod,
		OnQueued: func(st *backend.State, ch backend.Changes) {
			for _, f := range onQueued {
				f(st, ch)
			}
		},
		OnSync: func(r backend.SyncResult) {
			for _, f := range onSync {
				f(r)
			}
		},
	}, nil
}
