package iptables

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/metrics"
)

// ownedRules counts the rules in kpng's chains of a fake table: what
// kubeproxy_sync_proxy_rules_iptables_total must report (as upstream, the
// jumps from builtin chains are not counted).
func ownedRules(f *fakeTables, table string) int {
	n := 0
	for c, rs := range f.tables[table] {
		if strings.HasPrefix(c, chainPrefix) {
			n += len(rs)
		}
	}
	return n
}

// lastWritten counts the "-A" lines of a table in the last restore input.
func lastWritten(f *fakeTables, table string) int {
	in := f.restores[len(f.restores)-1]
	filter, nat, _ := strings.Cut(in, "*nat\n")
	part := filter
	if table == "nat" {
		part = nat
	}
	n := 0
	for _, l := range strings.Split(part, "\n") {
		if strings.HasPrefix(l, "-A ") {
			n++
		}
	}
	return n
}

// metric returns the child of metric name with the given label values
// (label, value, label, value...): nil when it does not exist yet, and
// registered false when the metric itself is not registered yet.
func metric(t *testing.T, name string, labels ...string) (m *dto.Metric, registered bool) {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m, true
		}
		return nil, true
	}
	return nil, false
}

// metricValue reads a gauge or counter (0 when the child does not exist
// yet).
func metricValue(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m, registered := metric(t, name, labels...)
	if !registered {
		t.Fatalf("metric %s is not registered", name)
	}
	if m.GetGauge() != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

func TestBackendMetrics(t *testing.T) {
	metrics.Register(metrics.ModeIPTables)
	fam := metrics.IPv4
	// Counters are exposed from their first use.
	metrics.IPTablesRestoreFailuresTotal.WithLabelValues(fam).Add(0)
	metrics.IPTablesPartialRestoreFailuresTotal.WithLabelValues(fam).Add(0)
	f := newFakeTables()
	cfg := testConfig()
	b := &Backend{cfg: cfg, proxiers: []*proxier{newProxier(false, cfg, f)}}
	ctx := context.Background()
	rules := func(table string) float64 {
		return metricValue(t, "kubeproxy_sync_proxy_rules_iptables_total", "table", table, "ip_family", fam)
	}
	last := func(table string) float64 {
		return metricValue(t, "kubeproxy_sync_proxy_rules_iptables_last", "table", table, "ip_family", fam)
	}
	failures := func() (restore, partial float64) {
		return metricValue(t, "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "ip_family", fam),
			metricValue(t, "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "ip_family", fam)
	}
	check := func(step string) {
		t.Helper()
		for _, tbl := range []string{"filter", "nat"} {
			if got, want := int(rules(tbl)), ownedRules(f, tbl); got != want {
				t.Errorf("%s: iptables_total{table=%s} = %d; the tables hold %d kpng rules", step, tbl, got, want)
			}
			if got, want := int(last(tbl)), lastWritten(f, tbl); got != want {
				t.Errorf("%s: iptables_last{table=%s} = %d; the last restore wrote %d", step, tbl, got, want)
			}
		}
	}

	lb := named("lb", "10.96.0.20", func(s *localv1.Service) {
		s.Type = localv1.ServiceType_LOAD_BALANCER
		s.Ports[0].NodePort = 30020
		s.LoadBalancerIps = []string{"203.0.113.20"}
		s.LoadBalancerSourceRanges = []string{"192.168.77.0/24"}
		s.ClientIpAffinitySeconds = 60
	}, ep("10.244.1.5", 8080, true), ep("10.244.2.7", 8080, false))
	st := newState(
		named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true), ep("10.244.2.7", 8080, false)),
		named("none", "10.96.0.11", nil),
		lb)
	if err := b.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
		t.Fatal(err)
	}
	check("full sync")
	if rules("nat") < 20 {
		t.Fatalf("iptables_total{nat} = %v: too few for three services", rules("nat"))
	}

	// One endpoint changes: the total follows, the last counts the
	// partial restore only.
	web := named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true), ep("10.244.2.8", 8080, false), ep("10.244.2.9", 8080, false))
	st.Services[backend.KeyOf(web)] = web
	if err := b.Sync(ctx, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web)}}); err != nil {
		t.Fatal(err)
	}
	check("partial sync")
	if l := last("nat"); l == 0 || l >= rules("nat") {
		t.Errorf("iptables_last{nat} = %v after a one-service change; total %v", l, rules("nat"))
	}
	delete(st.Services, backend.KeyOf(lb))
	if err := b.Sync(ctx, st, backend.Changes{Deleted: []backend.ServiceKey{backend.KeyOf(lb)}}); err != nil {
		t.Fatal(err)
	}
	check("service deleted")

	// A flushed table: the partial restore fails on the canary (counted
	// as a partial and as a restore failure), a full sync repairs it.
	r0, p0 := failures()
	for c := range f.tables["nat"] {
		if !isBuiltin("nat", c) {
			delete(f.tables["nat"], c)
		} else {
			f.tables["nat"][c] = nil
		}
	}
	web = named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true))
	st.Services[backend.KeyOf(web)] = web
	if err := b.Sync(ctx, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web)}}); err != nil {
		t.Fatal(err)
	}
	check("repaired")
	if r, p := failures(); r != r0+1 || p != p0+1 {
		t.Errorf("after a canary failure: restore failures %v -> %v, partial %v -> %v; want +1 each", r0, r, p0, p)
	}

	// Both the partial and the full restore fail: two restore failures,
	// one partial.
	r0, p0 = failures()
	web = named("web", "10.96.0.10", nil, ep("10.244.1.6", 8080, true))
	st.Services[backend.KeyOf(web)] = web
	f.failAll = errors.New("boom")
	if err := b.Sync(ctx, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web)}}); err == nil {
		t.Fatal("want the restores' error")
	}
	f.failAll = nil
	if r, p := failures(); r != r0+2 || p != p0+1 {
		t.Errorf("after two failed restores: restore failures %v -> %v, partial %v -> %v; want +2, +1", r0, r, p0, p)
	}
}

// TestRestoreFailuresPerFamily drives the backend with the hooks the driver
// calls (the metrics recorder among them): a failed restore is counted
// under its own family only, once per restore that failed, and a failed
// iptables-save is no restore failure, as in kube-proxy, where each family's
// proxier counts its own.
func TestRestoreFailuresPerFamily(t *testing.T) {
	cfg := testConfig()
	cfg.HealthzBindAddress, cfg.MetricsBindAddress = "", ""
	cfg.DryRun = true // no conntrack cleaners
	f4, f6 := newFakeTables(), newFakeTables()
	b := &Backend{cfg: cfg, proxiers: []*proxier{newProxier(false, cfg, f4), newProxier(true, cfg, f6)}}
	plugin := &Plugin{Config: *cfg}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := plugin.startHelpers(ctx, b); err != nil {
		t.Fatal(err)
	}
	opts := plugin.runOptions(b)
	sync := func(st *backend.State, ch backend.Changes) error {
		start := time.Now()
		opts.OnQueued(st, ch)
		err := b.Sync(ctx, st, ch)
		opts.OnSync(backend.SyncResult{State: st, Changes: ch, Start: start, Duration: time.Since(start), Err: err})
		return err
	}
	type counts struct{ restore4, restore6, partial4, partial6 float64 }
	read := func() counts {
		v := func(name, fam string) float64 {
			return metricValue(t, "kubeproxy_sync_proxy_rules_iptables_"+name+"_failures_total", "ip_family", fam)
		}
		return counts{v("restore", metrics.IPv4), v("restore", metrics.IPv6), v("partial_restore", metrics.IPv4), v("partial_restore", metrics.IPv6)}
	}
	expect := func(step string, before counts, want counts) {
		t.Helper()
		got := read()
		delta := counts{got.restore4 - before.restore4, got.restore6 - before.restore6, got.partial4 - before.partial4, got.partial6 - before.partial6}
		if delta != want {
			t.Errorf("%s: counted %+v, want %+v", step, delta, want)
		}
	}

	web4 := named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true))
	web6 := named("web", "fd00:10:96::10", func(s *localv1.Service) { s.Family = localv1.IPFamily_IPV6 }, ep("fd00:10:244:1::5", 8080, true))
	st := newState(web4, web6)

	c := read()
	f6.failNext = errors.New("ip6tables-restore: boom")
	if err := sync(st, backend.Changes{Reset: true}); err == nil {
		t.Fatal("the IPv6 restore failed: want an error")
	}
	expect("IPv6 full restore failed", c, counts{restore6: 1})
	if err := sync(st, backend.Changes{Reset: true}); err != nil {
		t.Fatal(err)
	}

	// A flushed IPv4 nat table: the partial restore fails on the canary, a
	// full one repairs it in the same sync.
	c = read()
	for ch := range f4.tables["nat"] {
		if !isBuiltin("nat", ch) {
			delete(f4.tables["nat"], ch)
		}
	}
	web4 = named("web", "10.96.0.10", nil, ep("10.244.1.6", 8080, true))
	st.Services[backend.KeyOf(web4)] = web4
	if err := sync(st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web4)}}); err != nil {
		t.Fatal(err)
	}
	expect("IPv4 partial restore failed, full repaired", c, counts{restore4: 1, partial4: 1})

	// iptables-save fails: the sync fails, but no restore ran.
	c = read()
	f4.failSave = errors.New("iptables-save: boom")
	if err := sync(st, backend.Changes{Reset: true}); err == nil {
		t.Fatal("iptables-save failed: want an error")
	}
	f4.failSave = nil
	expect("iptables-save failed", c, counts{})
	if err := sync(st, backend.Changes{Reset: true}); err != nil {
		t.Fatal(err)
	}

	// Both IPv6 restores fail (the partial and the full that follows).
	c = read()
	web6 = named("web", "fd00:10:96::10", func(s *localv1.Service) { s.Family = localv1.IPFamily_IPV6 }, ep("fd00:10:244:1::6", 8080, true))
	st.Services[backend.KeyOf(web6)] = web6
	f6.failAll = errors.New("ip6tables-restore: boom")
	if err := sync(st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web6)}}); err == nil {
		t.Fatal("want the IPv6 restores' error")
	}
	f6.failAll = nil
	expect("IPv6 partial and full restores failed", c, counts{restore6: 2, partial6: 1})
}

// onceFeed delivers one state, then nothing until ctx ends.
type onceFeed struct {
	st   *backend.State
	sent bool
}

func (f *onceFeed) Next(ctx context.Context) (*backend.State, backend.Changes, error) {
	if !f.sent {
		f.sent = true
		return f.st, backend.Changes{Reset: true}, nil
	}
	<-ctx.Done()
	return nil, backend.Changes{}, ctx.Err()
}

// histogramCount reads the number of observations of a histogram (0 before
// it is registered).
func histogramCount(t *testing.T, name string, labels ...string) uint64 {
	t.Helper()
	m, _ := metric(t, name, labels...)
	return m.GetHistogram().GetSampleCount()
}

// TestPeriodicSyncsAreRecordedPartial runs the backend under the driver:
// the first sync is a full one; the periodic syncs that follow only check
// the canary (a partial restore, --full-sync-period not yet due), and the
// driver and kube-proxy's duration histograms must say partial for them.
func TestPeriodicSyncsAreRecordedPartial(t *testing.T) {
	cfg := testConfig()
	cfg.HealthzBindAddress, cfg.MetricsBindAddress = "", ""
	cfg.DryRun = true // no conntrack cleaners
	cfg.FullSyncPeriod = time.Hour
	cfg.MinSyncPeriod, cfg.SyncPeriod = 0, 20*time.Millisecond
	f := newFakeTables()
	b := &Backend{cfg: cfg, proxiers: []*proxier{newProxier(false, cfg, f)}}
	plugin := &Plugin{Config: *cfg}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := plugin.startHelpers(ctx, b); err != nil {
		t.Fatal(err)
	}
	full0 := histogramCount(t, "kubeproxy_sync_full_proxy_rules_duration_seconds", "ip_family", metrics.IPv4)
	partial0 := histogramCount(t, "kubeproxy_sync_partial_proxy_rules_duration_seconds", "ip_family", metrics.IPv4)

	opts := plugin.runOptions(b)
	results := make(chan backend.SyncResult, 16)
	record := opts.OnSync
	opts.OnSync = func(r backend.SyncResult) {
		record(r)
		select {
		case results <- r:
		default:
		}
	}
	done := make(chan error, 1)
	feed := &onceFeed{st: newState(named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true)))}
	go func() { done <- backend.Run(ctx, feed, b, opts) }()
	var got []backend.SyncResult
	for len(got) < 3 {
		select {
		case r := <-results:
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			got = append(got, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d syncs in 10s, want 3", len(got))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !got[0].Full {
		t.Error("first sync: Full = false")
	}
	for i, r := range got[1:] {
		if !r.Changes.Resync || r.Full {
			t.Errorf("sync %d: resync=%v full=%v; want a periodic partial sync", i+2, r.Changes.Resync, r.Full)
		}
	}
	if n := len(f.restores); n < 3 || !strings.Contains(f.restores[n-1], "-F "+chainCanary) || strings.Contains(f.restores[n-1], ":"+chainServices) {
		t.Errorf("the last periodic restore was not a canary check:\n%s", f.restores[len(f.restores)-1])
	}
	full := histogramCount(t, "kubeproxy_sync_full_proxy_rules_duration_seconds", "ip_family", metrics.IPv4) - full0
	partial := histogramCount(t, "kubeproxy_sync_partial_proxy_rules_duration_seconds", "ip_family", metrics.IPv4) - partial0
	if full != 1 || partial < 2 {
		t.Errorf("recorded %d full and %d partial syncs; want 1 full and at least 2 partial", full, partial)
	}
}
