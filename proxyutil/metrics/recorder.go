package metrics

import (
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// FamilyLabel is the ip_family label value of f ("IPv4" or "IPv6").
func FamilyLabel(f localv1.IPFamily) string {
	if f == localv1.IPFamily_IPV6 {
		return IPv6
	}
	return IPv4
}

// Recorder turns the hooks of [backend.Run] into kube-proxy's metrics. Its
// work is proportional to what changed, except after a Reset (the first
// sync, or one after a failure) where it looks at every entry once.
//
// kube-proxy runs one proxier per IP family; a kpng backend syncs all its
// families in one call, so the per-family metrics of a sync (durations,
// timestamps, failures) are recorded under each family the recorder was
// created with, and those about entries (network programming latency, no
// local endpoints) under the entry's own family.
type Recorder struct {
	mode     string
	families []string
	now      func() time.Time
	started  int64 // trigger times older than this predate us: not observed

	mu sync.Mutex
	// seen is the last version of each entry, to tell service changes from
	// endpoint changes. The messages are immutable, so keeping them is safe.
	seen       map[backend.ServiceKey]*localv1.ServiceEndpoints
	pendingSvc map[backend.ServiceKey]struct{}
	pendingEps map[backend.ServiceKey]struct{}
	// observed is the newest trigger time already observed, per entry, so a
	// Reset or a Service-only change never observes a trigger time twice.
	observed map[backend.ServiceKey]int64
	// noLocal is each entry's contribution to the no-local-endpoints
	// gauges, and noLocalSum their sums per family label.
	noLocal    map[backend.ServiceKey]noLocalCount
	noLocalSum map[string]noLocalCount
}

type noLocalCount struct{ internal, external int }

// NewRecorder registers mode's metrics (see [Register]) and returns a
// recorder for a backend that serves the given families (both when none is
// given).
func NewRecorder(mode string, families ...localv1.IPFamily) *Recorder {
	Register(mode)
	return newRecorder(mode, time.Now, families...)
}

func newRecorder(mode string, now func() time.Time, families ...localv1.IPFamily) *Recorder {
	if len(families) == 0 {
		families = []localv1.IPFamily{localv1.IPFamily_IPV4, localv1.IPFamily_IPV6}
	}
	r := &Recorder{
		mode:       mode,
		now:        now,
		started:    now().UnixNano(),
		seen:       map[backend.ServiceKey]*localv1.ServiceEndpoints{},
		pendingSvc: map[backend.ServiceKey]struct{}{},
		pendingEps: map[backend.ServiceKey]struct{}{},
		observed:   map[backend.ServiceKey]int64{},
		noLocal:    map[backend.ServiceKey]noLocalCount{},
		noLocalSum: map[string]noLocalCount{},
	}
	for _, f := range families {
		r.families = append(r.families, FamilyLabel(f))
	}
	return r
}

// Hooks returns NewRecorder(mode, families...)'s OnQueued and OnSync, for
// backend.Options.
func Hooks(mode string, families ...localv1.IPFamily) (onQueued func(*backend.State, backend.Changes), onSync func(backend.SyncResult)) {
	r := NewRecorder(mode, families...)
	return r.OnQueued, r.OnSync
}

// OnQueued is a backend.Options.OnQueued hook: it counts the service and
// endpoint changes delivered and sets the last-queued timestamp.
func (r *Recorder) OnQueued(state *backend.State, ch backend.Changes) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := float64(r.now().UnixNano()) / 1e9
	for _, f := range r.families {
		SyncProxyRulesLastQueuedTimestamp.WithLabelValues(f).Set(now)
	}
	if ch.Reset {
		for k := range r.seen {
			if state.Services[k] == nil {
				r.classify(k, nil)
			}
		}
		for k, se := range state.Services {
			r.classify(k, se)
		}
	} else {
		for _, k := range ch.Set {
			r.classify(k, state.Services[k])
		}
		for _, k := range ch.Deleted {
			r.classify(k, nil)
		}
	}
	ServiceChangesPending.Set(float64(len(r.pendingSvc)))
	EndpointChangesPending.Set(float64(len(r.pendingEps)))
}

// classify counts the change of entry k to cur (nil: deleted).
func (r *Recorder) classify(k backend.ServiceKey, cur *localv1.ServiceEndpoints) {
	prev := r.seen[k]
	if prev == cur {
		return
	}
	var svcChanged, epsChanged bool
	switch {
	case cur == nil:
		svcChanged, epsChanged = true, len(prev.Endpoints) > 0
		delete(r.seen, k)
	case prev == nil:
		svcChanged, epsChanged = true, len(cur.Endpoints) > 0
		r.seen[k] = cur
	default:
		svcChanged = !proto.Equal(prev.Service, cur.Service)
		epsChanged = !endpointsEqual(prev.Endpoints, cur.Endpoints)
		r.seen[k] = cur
	}
	if svcChanged {
		ServiceChangesTotal.Inc()
		r.pendingSvc[k] = struct{}{}
	}
	if epsChanged {
		EndpointChangesTotal.Inc()
		r.pendingEps[k] = struct{}{}
	}
}

func endpointsEqual(a, b []*localv1.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// OnSync is a backend.Options.OnSync hook: it observes the sync's duration
// (full or partial as SyncResult.Full says), and after a success the
// last-sync timestamp, the network programming latency of the entries that
// changed and the no-local-endpoints gauges.
func (r *Recorder) OnSync(res backend.SyncResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The changes are taken by the sync, whatever its outcome (kube-proxy
	// checks them out when the sync starts).
	clear(r.pendingSvc)
	clear(r.pendingEps)
	ServiceChangesPending.Set(0)
	EndpointChangesPending.Set(0)

	secs := res.Duration.Seconds()
	for _, f := range r.families {
		SyncProxyRulesLatency.WithLabelValues(f).Observe(secs)
		if res.Full {
			SyncFullProxyRulesLatency.WithLabelValues(f).Observe(secs)
		} else {
			SyncPartialProxyRulesLatency.WithLabelValues(f).Observe(secs)
		}
	}
	if res.Err != nil {
		// The mode's failure counters (nftables transactions, iptables
		// restores) are the backend's to count: only it knows which
		// family's kernel update failed.
		return
	}

	now := r.now()
	if res.Changes.Reset {
		for k := range r.noLocal {
			if res.State.Services[k] == nil {
				r.forget(k)
			}
		}
		for k, se := range res.State.Services {
			r.synced(k, se, now)
		}
	} else {
		for _, k := range res.Changes.Set {
			if se := res.State.Services[k]; se != nil {
				r.synced(k, se, now)
			}
		}
		for _, k := range res.Changes.Deleted {
			r.forget(k)
		}
	}
	for _, f := range r.families {
		SyncProxyRulesLastTimestamp.WithLabelValues(f).Set(float64(now.UnixNano()) / 1e9)
		n := r.noLocalSum[f]
		SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("internal", f).Set(float64(n.internal))
		SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("external", f).Set(float64(n.external))
	}
}

// synced records that entry k, now se, is programmed.
func (r *Recorder) synced(k backend.ServiceKey, se *localv1.ServiceEndpoints, now time.Time) {
	f := FamilyLabel(k.Family)
	if t := se.TriggerTimeUnixNano; t > r.started && t > r.observed[k] {
		r.observed[k] = t
		NetworkProgrammingLatency.WithLabelValues(f).Observe(now.Sub(time.Unix(0, t)).Seconds())
	}
	c := noLocalOf(se)
	sum := r.noLocalSum[f]
	old := r.noLocal[k]
	sum.internal += c.internal - old.internal
	sum.external += c.external - old.external
	r.noLocalSum[f] = sum
	if c == (noLocalCount{}) {
		delete(r.noLocal, k)
	} else {
		r.noLocal[k] = c
	}
}

func (r *Recorder) forget(k backend.ServiceKey) {
	delete(r.observed, k)
	if old, ok := r.noLocal[k]; ok {
		f := FamilyLabel(k.Family)
		sum := r.noLocalSum[f]
		sum.internal -= old.internal
		sum.external -= old.external
		r.noLocalSum[f] = sum
		delete(r.noLocal, k)
	}
}

// noLocalOf counts the ports of se that kube-proxy's sync counts in
// sync_proxy_rules_no_local_endpoints_total: ports with endpoints somewhere
// in the cluster, a Local policy, and no endpoint in the local set.
func noLocalOf(se *localv1.ServiceEndpoints) noLocalCount {
	svc := se.Service
	if svc.InternalTrafficPolicy != localv1.TrafficPolicy_LOCAL && svc.ExternalTrafficPolicy != localv1.TrafficPolicy_LOCAL {
		return noLocalCount{}
	}
	var c noLocalCount
	for _, p := range svc.Ports {
		if !p.HasEndpoints || hasLocal(se.Endpoints, p) {
			continue
		}
		if svc.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL {
			c.internal++
		}
		if svc.ExternalTrafficPolicy == localv1.TrafficPolicy_LOCAL {
			c.external++
		}
	}
	return c
}

func hasLocal(eps []*localv1.Endpoint, p *localv1.ServicePort) bool {
	for _, ep := range eps {
		if ep.InLocalSet && ep.PortName == p.Name && ep.Protocol == p.Protocol {
			return true
		}
	}
	return false
}
