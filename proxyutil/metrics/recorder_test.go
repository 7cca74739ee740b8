package metrics

import (
	"errors"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/internal/metricstest"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func key(name string, f localv1.IPFamily) backend.ServiceKey {
	return backend.ServiceKey{Namespace: "ns", Name: name, Family: f}
}

// entry builds a one-port UDP service; local lists which endpoints are in
// the local set.
func entry(name string, f localv1.IPFamily, etp localv1.TrafficPolicy, trigger time.Time, eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
	se := &localv1.ServiceEndpoints{
		Service: &localv1.Service{
			Namespace: "ns", Name: name, Family: f, Type: localv1.ServiceType_LOAD_BALANCER, ClusterIp: "10.0.0.1",
			ExternalTrafficPolicy: etp,
			Ports:                 []*localv1.ServicePort{{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53, HasEndpoints: len(eps) > 0}},
		},
		Endpoints: eps,
	}
	if !trigger.IsZero() {
		se.TriggerTimeUnixNano = trigger.UnixNano()
	}
	return se
}

func ep(ip string, local bool) *localv1.Endpoint {
	return &localv1.Endpoint{PortName: "dns", Protocol: localv1.Protocol_UDP, Ip: ip, Port: 5353, Ready: true, Serving: true,
		InClusterSet: true, OnThisNode: local, InLocalSet: local}
}

type snapshot struct {
	svcTotal, epsTotal, svcPending, epsPending float64
	nplCount                                   map[string]uint64
}

func take(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{
		svcTotal:   metricstest.Counter(t, ServiceChangesTotal),
		epsTotal:   metricstest.Counter(t, EndpointChangesTotal),
		svcPending: metricstest.Gauge(t, ServiceChangesPending),
		epsPending: metricstest.Gauge(t, EndpointChangesPending),
		nplCount:   map[string]uint64{},
	}
	for _, f := range []string{IPv4, IPv6} {
		s.nplCount[f] = metricstest.HistogramCount(t, NetworkProgrammingLatency.WithLabelValues(f))
	}
	return s
}

func TestRecorder(t *testing.T) {
	Register(ModeNFTables)
	NetworkProgrammingLatency.Reset()
	NFTablesSyncFailuresTotal.Reset()
	SyncFullProxyRulesLatency.Reset()
	SyncPartialProxyRulesLatency.Reset()
	SyncProxyRulesNoLocalEndpointsTotal.Reset()

	clk := &clock{t: time.Unix(1_000_000, 0)}
	r := newRecorder(ModeNFTables, clk.now) // both families
	v4, v6 := localv1.IPFamily_IPV4, localv1.IPFamily_IPV6
	old := clk.t.Add(-time.Hour) // before the recorder started: never observed

	st := backend.NewState("n1")
	st.Services[key("a", v4)] = entry("a", v4, localv1.TrafficPolicy_CLUSTER, clk.t.Add(time.Second), ep("10.1.0.1", false))
	st.Services[key("b", v6)] = entry("b", v6, localv1.TrafficPolicy_LOCAL, old, ep("fd00::1", false))
	st.Services[key("c", v4)] = entry("c", v4, localv1.TrafficPolicy_CLUSTER, time.Time{})

	// First delivery: a reset; three services, two with endpoints.
	clk.t = clk.t.Add(2 * time.Second)
	before := take(t)
	r.OnQueued(st, backend.Changes{Reset: true})
	after := take(t)
	if d := after.svcTotal - before.svcTotal; d != 3 {
		t.Errorf("service changes: +%v, want +3", d)
	}
	if d := after.epsTotal - before.epsTotal; d != 2 {
		t.Errorf("endpoint changes: +%v, want +2", d)
	}
	if after.svcPending != 3 || after.epsPending != 2 {
		t.Errorf("pending: services %v endpoints %v, want 3 and 2", after.svcPending, after.epsPending)
	}
	if q := metricstest.Gauge(t, SyncProxyRulesLastQueuedTimestamp.WithLabelValues(IPv6)); q != float64(clk.t.Unix()) {
		t.Errorf("last queued %v, want %v", q, clk.t.Unix())
	}

	// The first sync succeeds: a full sync. Only a's trigger time is newer
	// than the recorder, so one latency is observed: 1s.
	clk.t = clk.t.Add(time.Second)
	r.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Reset: true}, Full: true, Duration: 3 * time.Millisecond})
	after = take(t)
	if after.svcPending != 0 || after.epsPending != 0 {
		t.Errorf("pending after sync: %v %v", after.svcPending, after.epsPending)
	}
	if after.nplCount[IPv4] != 1 || after.nplCount[IPv6] != 0 {
		t.Errorf("network programming observations %v, want IPv4:1", after.nplCount)
	}
	if s := metricstest.HistogramSum(t, NetworkProgrammingLatency.WithLabelValues(IPv4)); s != 2 {
		t.Errorf("network programming latency sum %v, want 2s", s)
	}
	for _, f := range []string{IPv4, IPv6} {
		if n := metricstest.HistogramCount(t, SyncFullProxyRulesLatency.WithLabelValues(f)); n != 1 {
			t.Errorf("%s full syncs %d, want 1", f, n)
		}
		if ts := metricstest.Gauge(t, SyncProxyRulesLastTimestamp.WithLabelValues(f)); ts != float64(clk.t.Unix()) {
			t.Errorf("%s last sync %v, want %v", f, ts, clk.t.Unix())
		}
	}
	// b: Local external policy, endpoints elsewhere only.
	if v := metricstest.Gauge(t, SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("external", IPv6)); v != 1 {
		t.Errorf("no local endpoints external IPv6 = %v, want 1", v)
	}
	if v := metricstest.Gauge(t, SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("internal", IPv6)); v != 0 {
		t.Errorf("no local endpoints internal IPv6 = %v, want 0", v)
	}

	// An endpoint-only change of a (new trigger time), and a Service-only
	// change of c (no endpoints, nothing to observe).
	st.Services[key("a", v4)] = entry("a", v4, localv1.TrafficPolicy_CLUSTER, clk.t, ep("10.1.0.1", false), ep("10.1.0.2", false))
	c2 := entry("c", v4, localv1.TrafficPolicy_CLUSTER, time.Time{})
	c2.Service.ExternalIps = []string{"192.0.2.1"}
	st.Services[key("c", v4)] = c2
	ch := backend.Changes{Set: []backend.ServiceKey{key("a", v4), key("c", v4)}}
	before = take(t)
	r.OnQueued(st, ch)
	after = take(t)
	if after.svcTotal-before.svcTotal != 1 || after.epsTotal-before.epsTotal != 1 {
		t.Errorf("changes: services +%v endpoints +%v, want +1 +1", after.svcTotal-before.svcTotal, after.epsTotal-before.epsTotal)
	}
	clk.t = clk.t.Add(500 * time.Millisecond)
	// The sync fails: timed, no latency observed, and the failure left to
	// the backend to count (it knows which family failed).
	r.OnSync(backend.SyncResult{State: st, Changes: ch, Duration: time.Millisecond, Err: errors.New("boom")})
	for _, f := range []string{IPv4, IPv6} {
		if v := metricstest.Counter(t, NFTablesSyncFailuresTotal.WithLabelValues(f)); v != 0 {
			t.Errorf("%s sync failures %v, want 0: the backend counts them", f, v)
		}
		if n := metricstest.HistogramCount(t, SyncPartialProxyRulesLatency.WithLabelValues(f)); n != 1 {
			t.Errorf("%s partial syncs %d, want 1 (failed syncs are timed too)", f, n)
		}
	}
	if n := take(t).nplCount[IPv4]; n != 1 {
		t.Errorf("latency observed on a failed sync: %d observations", n)
	}

	// The retry is a reset: a's new trigger time is observed once (0.5s),
	// its old one is not observed again.
	r.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Reset: true}, Duration: time.Millisecond})
	if n := take(t).nplCount[IPv4]; n != 2 {
		t.Errorf("observations after the retry %d, want 2", n)
	}
	if s := metricstest.HistogramSum(t, NetworkProgrammingLatency.WithLabelValues(IPv4)); s != 2.5 {
		t.Errorf("latency sum %v, want 2.5", s)
	}

	// b gains a local endpoint, then is deleted: the gauge follows.
	st.Services[key("b", v6)] = entry("b", v6, localv1.TrafficPolicy_LOCAL, old, ep("fd00::1", false), ep("fd00::2", true))
	ch = backend.Changes{Set: []backend.ServiceKey{key("b", v6)}}
	r.OnQueued(st, ch)
	r.OnSync(backend.SyncResult{State: st, Changes: ch})
	if v := metricstest.Gauge(t, SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("external", IPv6)); v != 0 {
		t.Errorf("no local endpoints after a local one appeared = %v, want 0", v)
	}
	st.Services[key("b", v6)] = entry("b", v6, localv1.TrafficPolicy_LOCAL, old, ep("fd00::1", false))
	r.OnQueued(st, ch)
	r.OnSync(backend.SyncResult{State: st, Changes: ch})
	if v := metricstest.Gauge(t, SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("external", IPv6)); v != 1 {
		t.Errorf("no local endpoints after the local one left = %v, want 1", v)
	}
	delete(st.Services, key("b", v6))
	ch = backend.Changes{Deleted: []backend.ServiceKey{key("b", v6)}}
	before = take(t)
	r.OnQueued(st, ch)
	after = take(t)
	if after.svcTotal-before.svcTotal != 1 || after.epsTotal-before.epsTotal != 1 {
		t.Errorf("deletion: services +%v endpoints +%v, want +1 +1", after.svcTotal-before.svcTotal, after.epsTotal-before.epsTotal)
	}
	r.OnSync(backend.SyncResult{State: st, Changes: ch})
	if v := metricstest.Gauge(t, SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("external", IPv6)); v != 0 {
		t.Errorf("no local endpoints after deletion = %v, want 0", v)
	}
}

// Full and partial sync durations follow what the backend did (a periodic
// Resync that found nothing to repair is partial; a change that made the
// backend rewrite everything is full), not what the driver asked.
func TestRecorderFullFollowsTheBackend(t *testing.T) {
	Register(ModeNFTables)
	SyncFullProxyRulesLatency.Reset()
	SyncPartialProxyRulesLatency.Reset()
	r := newRecorder(ModeNFTables, time.Now, localv1.IPFamily_IPV4)
	st := backend.NewState("n1")
	r.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Resync: true}, Full: false})
	r.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{}, Full: true})
	r.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{}, Full: true})
	full := metricstest.HistogramCount(t, SyncFullProxyRulesLatency.WithLabelValues(IPv4))
	partial := metricstest.HistogramCount(t, SyncPartialProxyRulesLatency.WithLabelValues(IPv4))
	if full != 2 || partial != 1 {
		t.Errorf("full %d, partial %d syncs; want 2 and 1", full, partial)
	}
}

func TestNoLocalOf(t *testing.T) {
	v4 := localv1.IPFamily_IPV4
	for _, tc := range []struct {
		name string
		se   *localv1.ServiceEndpoints
		want noLocalCount
	}{
		{"cluster policies never count", entry("x", v4, localv1.TrafficPolicy_CLUSTER, time.Time{}, ep("10.0.0.1", false)), noLocalCount{}},
		{"local external policy without local endpoint", entry("x", v4, localv1.TrafficPolicy_LOCAL, time.Time{}, ep("10.0.0.1", false)), noLocalCount{external: 1}},
		{"local external policy with a local endpoint", entry("x", v4, localv1.TrafficPolicy_LOCAL, time.Time{}, ep("10.0.0.1", true)), noLocalCount{}},
		{"no endpoints anywhere is a reject, not a drop", entry("x", v4, localv1.TrafficPolicy_LOCAL, time.Time{}), noLocalCount{}},
		{"local internal policy", func() *localv1.ServiceEndpoints {
			se := entry("x", v4, localv1.TrafficPolicy_CLUSTER, time.Time{}, ep("10.0.0.1", false))
			se.Service.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
			return se
		}(), noLocalCount{internal: 1}},
		{"a local endpoint of another port does not count", func() *localv1.ServiceEndpoints {
			e := ep("10.0.0.1", true)
			e.PortName = "other"
			return entry("x", v4, localv1.TrafficPolicy_LOCAL, time.Time{}, e)
		}(), noLocalCount{external: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := noLocalOf(tc.se); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
