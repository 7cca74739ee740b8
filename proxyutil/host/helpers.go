package host

import (
	"context"
	"net"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/conntrack"
	"github.com/kpng/kpng/proxyutil/healthcheck"
	"github.com/kpng/kpng/proxyutil/metrics"
)

// StartHelpers starts what kube-proxy runs beside its rules (it listens
// on the host): the metrics recorder of mode (metrics.ModeNFTables, ...)
// and, unless their address is empty, the /metrics server and the
// /healthz and /livez server; the services' health-check listeners; and,
// unless c.DryRun, the conntrack cleaners of families (stale UDP flows,
// and after a full sync the TCP handshakes never NATed). It
// returns the driver options that feed them, with c's sync periods. The
// servers stop when ctx ends.
func StartHelpers(ctx context.Context, mode string, c *Config, families []localv1.IPFamily) (backend.Options, error) {
	return StartHelpersWith(ctx, mode, c, families, HelperOptions{})
}

// HelperOptions tunes StartHelpers for a backend whose dataplane differs
// from kube-proxy's netfilter modes.
type HelperOptions struct {
	// NoConntrackCleaner: start no conntrack cleaner, for a
	// backend that makes no conntrack NAT entries (the cleaner deletes
	// flows whose original destination is a service address, which such
	// a backend never leaves to conntrack).
	NoConntrackCleaner bool
}

// StartHelpersWith is StartHelpers with options.
func StartHelpersWith(ctx context.Context, mode string, c *Config, families []localv1.IPFamily, o HelperOptions) (backend.Options, error) {
	log := klog.FromContext(ctx)
	// start listens with srv, then serves until ctx ends.
	start := func(name string, srv server) error {
		ln, err := srv.Listen()
		if err != nil {
			return err
		}
		log.Info(name+" listening", "address", ln.Addr().String())
		go func() {
			if err := srv.Serve(ctx, ln); err != nil {
				log.Error(err, name+" stopped")
			}
		}()
		return nil
	}
	rec := metrics.NewRecorder(mode, families...)
	onQueued := []func(*backend.State, backend.Changes){rec.OnQueued}
	onSync := []func(backend.SyncResult){rec.OnSync}
	var health healthcheck.HealthChecker
	if c.HealthzBindAddress != "" {
		hz := healthcheck.NewProxyHealthServer(c.HealthzBindAddress, 2*c.SyncPeriod, families...)
		if err := start("Health server", hz); err != nil {
			return backend.Options{}, err
		}
		onQueued = append(onQueued, hz.OnQueued)
		onSync = append(onSync, hz.OnSync)
		health = hz
	}
	svc := healthcheck.NewServiceHealthServer(healthcheck.ServiceOptions{NodePortAddresses: c.NodePortAddresses, Proxy: health})
	context.AfterFunc(ctx, svc.Close)
	onSync = append(onSync, svc.OnSync)
	if c.MetricsBindAddress != "" {
		if err := start("Metrics server", &metrics.Server{Addr: c.MetricsBindAddress, ProxyMode: mode, Profiling: c.Profiling}); err != nil {
			return backend.Options{}, err
		}
	}
	if !c.DryRun && !o.NoConntrackCleaner {
		for _, f := range families {
			onSync = append(onSync, conntrack.NewCleaner(f).OnSync)
		}
	}
	return backend.Options{
		MinSyncPeriod: c.MinSyncPeriod,
		ResyncPeriod:  c.SyncPeriod,
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

// server is the /healthz or the /metrics server.
type server interface {
	Listen() (net.Listener, error)
	Serve(ctx context.Context, ln net.Listener) error
}
