package metrics

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// kube-proxy's metrics as v1.36 exposes them in nftables and iptables
// modes (pkg/proxy/metrics/metrics.go): the contract dashboards rely on.
var upstream = []struct {
	name, typ, help string
	labels          []string
}{
	{"kubeproxy_sync_proxy_rules_duration_seconds", "HISTOGRAM", "SyncProxyRules latency in seconds", []string{"ip_family"}},
	{"kubeproxy_sync_full_proxy_rules_duration_seconds", "HISTOGRAM", "SyncProxyRules latency in seconds for full resyncs", []string{"ip_family"}},
	{"kubeproxy_sync_partial_proxy_rules_duration_seconds", "HISTOGRAM", "SyncProxyRules latency in seconds for partial resyncs", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", "GAUGE", "The last time proxy rules were successfully synced", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "GAUGE", "The last time a sync of proxy rules was queued", []string{"ip_family"}},
	{"kubeproxy_network_programming_duration_seconds", "HISTOGRAM", "In Cluster Network Programming Latency in seconds", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", "GAUGE", "Pending proxy rules Endpoint changes", nil},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_total", "COUNTER", "Cumulative proxy rules Endpoint changes", nil},
	{"kubeproxy_sync_proxy_rules_service_changes_pending", "GAUGE", "Pending proxy rules Service changes", nil},
	{"kubeproxy_sync_proxy_rules_service_changes_total", "COUNTER", "Cumulative proxy rules Service changes", nil},
	{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", "GAUGE", "Number of services with a Local traffic policy and no endpoints", []string{"ip_family", "traffic_policy"}},
	{"kubeproxy_proxy_healthz_total", "COUNTER", "Cumulative proxy healthz HTTP status", []string{"code"}},
	{"kubeproxy_proxy_livez_total", "COUNTER", "Cumulative proxy livez HTTP status", []string{"code"}},
	{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "COUNTER", "Cumulative proxy nftables sync failures", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", "COUNTER", "Cumulative proxy nftables cleanup failures", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "COUNTER", "Cumulative proxy iptables restore failures", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "COUNTER", "Cumulative proxy iptables partial restore failures", []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_iptables_total", "GAUGE", "Total number of iptables rules owned by kube-proxy", []string{"ip_family", "table"}},
	{"kubeproxy_sync_proxy_rules_iptables_last", "GAUGE", "Number of iptables rules written by kube-proxy in last sync", []string{"ip_family", "table"}},
	{"kubeproxy_conntrack_reconciler_sync_duration_seconds", "HISTOGRAM", "ReconcileConntrackFlowsLatency latency in seconds", []string{"ip_family"}},
	{"kubeproxy_conntrack_reconciler_deleted_entries_total", "COUNTER", "Cumulative conntrack flows deleted by conntrack reconciler", []string{"ip_family"}},
	{"kubeproxy_iptables_localhost_nodeports_accepted_packets_total", "COUNTER", "Number of packets accepted on nodeports of loopback interface", nil},
	{"kubeproxy_iptables_ct_state_invalid_dropped_packets_total", "COUNTER", "packets dropped by iptables to work around conntrack problems", nil},
}

// touchAll gives every vector one child, so that every metric is exposed.
func touchAll() {
	for _, f := range []string{IPv4, IPv6} {
		SyncProxyRulesLatency.WithLabelValues(f).Observe(0.002)
		SyncFullProxyRulesLatency.WithLabelValues(f).Observe(0.002)
		SyncPartialProxyRulesLatency.WithLabelValues(f).Observe(0.002)
		SyncProxyRulesLastTimestamp.WithLabelValues(f).Set(1)
		SyncProxyRulesLastQueuedTimestamp.WithLabelValues(f).Set(1)
		NetworkProgrammingLatency.WithLabelValues(f).Observe(1)
		SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("internal", f).Set(0)
		NFTablesSyncFailuresTotal.WithLabelValues(f).Add(0)
		NFTablesCleanupFailuresTotal.WithLabelValues(f).Add(0)
		IPTablesRestoreFailuresTotal.WithLabelValues(f).Add(0)
		IPTablesPartialRestoreFailuresTotal.WithLabelValues(f).Add(0)
		IPTablesRulesTotal.WithLabelValues("nat", f).Set(0)
		IPTablesRulesLastSync.WithLabelValues("nat", f).Set(0)
		ReconcileConntrackFlowsLatency.WithLabelValues(f).Observe(0.001)
		ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues(f).Add(0)
	}
	ProxyHealthzTotal.WithLabelValues("200").Add(0)
	ProxyLivezTotal.WithLabelValues("200").Add(0)
	// The nfacct counters are the kernel's: read as if it held 3 packets.
	for _, c := range []*nfacctCollector{LocalhostNodePortsAcceptedPackets, IPTablesCTStateInvalidDroppedPackets} {
		c.read = func(string) (uint64, error) { return 3, nil }
	}
}

func gather(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestRegisterExposesKubeProxyNames(t *testing.T) {
	Register(ModeNFTables)
	Register(ModeIPTables)
	Register(ModeNFTables) // again: no panic, no duplicate
	touchAll()
	got := gather(t)
	for _, m := range upstream {
		mf := got[m.name]
		if mf == nil {
			t.Errorf("%s: not exposed", m.name)
			continue
		}
		if mf.GetType().String() != m.typ {
			t.Errorf("%s: type %s, want %s", m.name, mf.GetType(), m.typ)
		}
		// component-base prefixes the stability level, as kube-proxy shows it.
		if want := "[ALPHA] " + m.help; mf.GetHelp() != want {
			t.Errorf("%s: help %q, want %q", m.name, mf.GetHelp(), want)
		}
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		if !slices.Equal(labels, m.labels) {
			t.Errorf("%s: labels %v, want %v", m.name, labels, m.labels)
		}
	}
}

func TestBuckets(t *testing.T) {
	Register(ModeNFTables)
	touchAll()
	got := gather(t)
	bounds := func(name string) []float64 {
		mf := got[name]
		if mf == nil {
			t.Fatalf("%s: not exposed", name)
		}
		var b []float64
		for _, bk := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			b = append(b, bk.GetUpperBound())
		}
		return b
	}
	var sync []float64
	for i, v := 0, 0.001; i < 15; i, v = i+1, v*2 {
		sync = append(sync, v)
	}
	for _, name := range []string{"kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_sync_full_proxy_rules_duration_seconds", "kubeproxy_sync_partial_proxy_rules_duration_seconds", "kubeproxy_conntrack_reconciler_sync_duration_seconds"} {
		if b := bounds(name); !slices.Equal(b, sync) {
			t.Errorf("%s: buckets %v, want %v", name, b, sync)
		}
	}
	// component-base's MergeBuckets starts with a 0 bucket, so kube-proxy
	// exposes le="0" too.
	npl := []float64{0, 0.25, 0.5}
	for s := 1; s <= 59; s++ {
		npl = append(npl, float64(s))
	}
	for s := 60; s <= 115; s += 5 {
		npl = append(npl, float64(s))
	}
	for s := 120; s <= 300; s += 30 {
		npl = append(npl, float64(s))
	}
	if b := bounds("kubeproxy_network_programming_duration_seconds"); !slices.Equal(b, npl) {
		t.Errorf("network programming buckets %v, want %v", b, npl)
	}
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func startServer(t *testing.T, s *Server) string {
	t.Helper()
	s.Addr = "127.0.0.1:0"
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func TestServer(t *testing.T) {
	Register(ModeNFTables)
	touchAll()
	configErr := false
	base := startServer(t, &Server{ProxyMode: ModeNFTables, Configz: func() ([]byte, error) {
		if configErr {
			return nil, io.ErrUnexpectedEOF
		}
		return []byte(`{"kubeproxy.config.k8s.io":{"mode":"nftables"}}`), nil
	}})

	code, h, body := get(t, base+"/proxyMode")
	if code != 200 || body != "nftables" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("/proxyMode: %d %q %v", code, body, h)
	}
	code, _, body = get(t, base+"/healthz")
	if code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, h, body = get(t, base+"/configz")
	if code != 200 || h.Get("Content-Type") != "application/json" || !strings.Contains(body, `"mode":"nftables"`) {
		t.Errorf("/configz: %d %v %q", code, h, body)
	}
	configErr = true
	if code, _, _ = get(t, base+"/configz"); code != http.StatusInternalServerError {
		t.Errorf("/configz failing: %d, want 500", code)
	}
	code, _, body = get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		"# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds",
		"# TYPE kubeproxy_network_programming_duration_seconds histogram",
		`kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv6"}`,
		"process_start_time_seconds", // the process and Go collectors kube-proxy also serves
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _, _ = get(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof served without Profiling: %d", code)
	}
}

func TestServerOptionalRoutes(t *testing.T) {
	base := startServer(t, &Server{ProxyMode: ModeIPTables, Profiling: true})
	if code, _, _ := get(t, base+"/configz"); code != http.StatusNotFound {
		t.Errorf("/configz without Configz: %d, want 404", code)
	}
	if code, _, body := get(t, base+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d", code)
	}
	if _, _, body := get(t, base+"/proxyMode"); body != "iptables" {
		t.Errorf("/proxyMode %q", body)
	}
}

func TestRunFailsOnBusyAddress(t *testing.T) {
	s := &Server{Addr: "127.0.0.1:0"}
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = (&Server{Addr: ln.Addr().String()}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("Run on a busy address: %v, want an error naming it", err)
	}
}

// A counter the kernel does not have (not made yet, no nfnetlink_acct) is
// left out of the scrape, not reported as 0 nor failing it.
func TestNFAcctCollectorSkipsAnUnreadableCounter(t *testing.T) {
	c := newNFAcctCollector("missing", LocalhostNodePortsAcceptedPackets.desc)
	c.read = func(string) (uint64, error) { return 0, io.ErrUnexpectedEOF }
	ch := make(chan metrics.Metric, 1)
	c.CollectWithStability(ch)
	if len(ch) != 0 {
		t.Errorf("an unreadable counter was reported")
	}
	c.read = func(string) (uint64, error) { return 7, nil }
	c.CollectWithStability(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil || m.GetCounter().GetValue() != 7 {
		t.Errorf("counter = %v, %v; want 7", m.GetCounter().GetValue(), err)
	}
}
