// Package healthcheck serves kube-proxy's health endpoints: the proxy's own
// /healthz and /livez ([ProxyHealthServer]), and one listener per
// healthCheckNodePort of LoadBalancer Services with externalTrafficPolicy
// Local ([ServiceHealthServer]), answering as kube-proxy does (same JSON,
// same headers, 200 with local ready endpoints and a healthy proxy, 503
// otherwise).
//
// Both are driven by the backend hooks, so a backend needs a few lines:
//
//	hz := healthcheck.NewProxyHealthServer("0.0.0.0:10256", 2*syncPeriod)
//	svc := healthcheck.NewServiceHealthServer(healthcheck.ServiceOptions{
//		NodePortAddresses: nodePortAddresses, Proxy: hz})
//	go hz.Run(ctx)
//	context.AfterFunc(ctx, svc.Close)
//	opts := backend.Options{
//		OnQueued: hz.OnQueued,
//		OnSync:   func(r backend.SyncResult) { hz.OnSync(r); svc.OnSync(r) },
//	}
//
// The service listeners follow each successful sync, with work proportional
// to the entries that changed; a port that cannot be opened is logged (and
// given to ServiceOptions.OnListenError) and retried on the next sync.
package healthcheck
