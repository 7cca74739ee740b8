package ebpf

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// StaleFlow names the sockets that a sync made stale: those the socket
// programs connected through Frontend (one the node's sockets dial) to
// Endpoint, which is no longer a serving endpoint of the frontend's
// Service port.
type StaleFlow struct {
	Frontend Frontend
	Endpoint netip.AddrPort
}

func (s StaleFlow) String() string { return s.Frontend.String() + " -> " + s.Endpoint.String() }

// staleTracker decides which sockets a sync leaves stale, as kube-proxy
// decides which conntrack flows it deletes (proxyutil/conntrack): after a
// sync, a flow to a Service address and port whose endpoint is not one of
// the port's serving endpoints (ready or serving; a terminating endpoint
// that still serves keeps its flows), of a UDP port, and only while the
// port has some serving endpoint. A Service deleted, or an address a
// Service no longer has, leaves its flows alone, as kube-proxy's filter no
// longer matches them.
//
// The kernel cannot tell which endpoints serve (the sets hold those chosen
// for new connections), so the tracker keeps, per Service port, the
// serving endpoints of the last sync that had some, and each sync that
// changes the port turns those no longer serving into StaleFlows for every
// address of the port. A socket cannot have been connected to an endpoint
// that never served, so this is kube-proxy's rule on the sockets that can
// exist.
type staleTracker struct {
	// tcp: TCP ports too (kube-proxy deletes no TCP flow; see docs/ebpf.md).
	tcp bool
	// serving: per Service, per port (portBase), the serving endpoints of
	// the last sync in which it had some.
	serving map[backend.ServiceKey]map[string]map[netip.AddrPort]bool
	// pending: the stale flows not yet destroyed, with the failed attempts.
	pending map[StaleFlow]int
}

func newStaleTracker() staleTracker {
	return staleTracker{serving: map[backend.ServiceKey]map[string]map[netip.AddrPort]bool{}, pending: map[StaleFlow]int{}}
}

// portBase names a Service port as Render's Route.AffinityKey does.
func portBase(k backend.ServiceKey, portName string, proto uint8) string {
	return fmt.Sprintf("%s/%s/%s", k, portName, protoName(proto))
}

// update follows Service k after a sync wrote r for se (se nil: the
// Service is gone, or not programmed). kernel, if not nil, gives the
// endpoints the kernel's set of a frontend holds: on a reset, for a
// Service the tracker has no record of (kpng restarted), the endpoints a
// socket may have been connected to are those.
func (t *staleTracker) update(k backend.ServiceKey, se *localv1.ServiceEndpoints, r *Rendered, kernel func(Frontend) []netip.AddrPort) {
	if se == nil || r == nil {
		delete(t.serving, k)
		return
	}
	old, known := t.serving[k]
	var record map[string]map[netip.AddrPort]bool // allocated for a tracked port only
	for _, port := range se.Service.Ports {
		proto, ok := protoNumber(port.Protocol)
		if !ok || !(proto == protoUDP || (t.tcp && proto == protoTCP)) {
			continue
		}
		if record == nil {
			record = map[string]map[netip.AddrPort]bool{}
		}
		base := portBase(k, port.Name, proto)
		serving := map[netip.AddrPort]bool{}
		for _, ep := range se.Endpoints {
			if ep.PortName != port.Name || ep.Protocol != port.Protocol || !(ep.Serving || ep.Ready) {
				continue
			}
			if ip, err := parseAddr(ep.Ip); err == nil {
				serving[netip.AddrPortFrom(ip, uint16(ep.Port))] = true
			}
		}
		var frontends []Frontend
		for f, rt := range r.Frontends {
			if !f.Outside && rt.AffinityKey == base {
				frontends = append(frontends, f)
			}
		}
		before := old[base]
		if !known && kernel != nil {
			before = map[netip.AddrPort]bool{}
			for _, f := range frontends {
				for _, ep := range kernel(f) {
					before[ep] = true
				}
			}
		}
		if len(serving) == 0 {
			// kube-proxy leaves the flows of a port without serving
			// endpoints alone; they are stale once some serve again.
			if len(before) > 0 {
				record[base] = before
			}
			continue
		}
		record[base] = serving
		for _, f := range frontends {
			for ep := range before {
				if !serving[ep] {
					t.pending[StaleFlow{Frontend: f, Endpoint: ep}] = 0
				}
			}
			// An endpoint that serves again is no longer stale (a
			// destroy that failed is not retried on it).
			for ep := range serving {
				delete(t.pending, StaleFlow{Frontend: f, Endpoint: ep})
			}
		}
	}
	if len(record) == 0 {
		delete(t.serving, k)
	} else {
		t.serving[k] = record
	}
}

// prune forgets the Services that are not in keep (after a reset).
func (t *staleTracker) prune(keep func(backend.ServiceKey) bool) {
	for k := range t.serving {
		if !keep(k) {
			delete(t.serving, k)
		}
	}
}

// flows returns the pending stale flows, sorted.
func (t *staleTracker) flows() []StaleFlow {
	return slices.SortedFunc(maps.Keys(t.pending), func(a, b StaleFlow) int {
		if c := compareFrontend(a.Frontend, b.Frontend); c != 0 {
			return c
		}
		return a.Endpoint.Compare(b.Endpoint)
	})
}

// maxDestroyAttempts bounds the retries of a stale flow whose destroy
// failed: after that many syncs, it is logged and dropped.
const maxDestroyAttempts = 5

// done records the outcome of destroying flows: forgotten on success,
// kept for the next sync on failure (dropped after maxDestroyAttempts,
// returned).
func (t *staleTracker) done(flows []StaleFlow, err error) (dropped []StaleFlow) {
	for _, f := range flows {
		n, ok := t.pending[f]
		if !ok {
			continue
		}
		if err == nil || n+1 >= maxDestroyAttempts {
			delete(t.pending, f)
			if err != nil {
				dropped = append(dropped, f)
			}
			continue
		}
		t.pending[f] = n + 1
	}
	return dropped
}

func compareFrontend(a, b Frontend) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	if a.Proto != b.Proto {
		return int(a.Proto) - int(b.Proto)
	}
	switch {
	case a.Outside == b.Outside:
		return 0
	case b.Outside:
		return -1
	}
	return 1
}

// SetSocketDestroyer makes each Sync destroy the sockets it left stale
// (StaleFlow) with s: those of UDP ports, and with tcp of TCP ports too.
// Flows of syncs before the call are not tracked.
func (d *Dataplane) SetSocketDestroyer(s SocketDestroyer, tcp bool) {
	d.sockets = s
	d.stale.tcp = tcp
}

// destroyStale destroys the sockets of the pending stale flows. A failure
// is logged; the flows are tried again after the next sync (there is one
// at least every sync period), up to maxDestroyAttempts times.
func (d *Dataplane) destroyStale(ctx context.Context) {
	if d.sockets == nil || len(d.stale.pending) == 0 {
		return
	}
	flows := d.stale.flows()
	start := time.Now()
	n, err := d.sockets.DestroySockets(ctx, flows)
	log := klog.FromContext(ctx)
	if err != nil {
		log.Error(err, "Failed to destroy the sockets connected to endpoints that no longer serve; will retry after the next sync", "flows", len(flows), "destroyed", n)
	} else {
		log.V(2).Info("Destroyed the sockets connected to endpoints that no longer serve", "flows", len(flows), "destroyed", n, "took", time.Since(start))
	}
	if dropped := d.stale.done(flows, err); len(dropped) > 0 {
		log.Error(err, "Gave up destroying the sockets of stale flows", "attempts", maxDestroyAttempts, "flows", dropped)
	}
}

// kernelEndpoints returns, for a reset, the endpoints of a frontend's set
// as the kernel holds them (kSvcs and kSets from Maps.Dump).
func kernelEndpoints(kSvcs map[Frontend]ServiceValue, kSets map[uint32]KernelSet) func(Frontend) []netip.AddrPort {
	return func(f Frontend) []netip.AddrPort {
		v, ok := kSvcs[f]
		if !ok || v.Count == 0 {
			return nil
		}
		var eps []netip.AddrPort
		for _, ep := range kSets[v.Set].Endpoints {
			if ep.IsValid() {
				eps = append(eps, ep)
			}
		}
		return eps
	}
}
