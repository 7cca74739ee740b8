package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// scrape is an excerpt of what kube-proxy v1.36 serves, with a second
// family and a label value that needs escaping added.
const scrape = `# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds
# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.001"} 0
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.002"} 3
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.004"} 7
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 8
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv4"} 0.0213
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 8
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="0.001"} 5
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="0.002"} 5
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="0.004"} 5
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="+Inf"} 5
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv6"} 0.002
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"} 5
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7638584e+09
kubeproxy_sync_proxy_rules_endpoint_changes_pending 2
process_resident_memory_bytes 5.1625984e+07 1700000000000
weird_metric{path="a \"quoted\", comma\\",  code = "200" ,} 1
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(scrape)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 16 {
		t.Errorf("parsed %d samples, want 16", len(m))
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", ipv4, 1.7638584e9},
		{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", nil, 2},
		{"process_resident_memory_bytes", nil, 51625984}, // the timestamp is not the value
		{"weird_metric", map[string]string{"path": `a "quoted", comma\`, "code": "200"}, 1},
		// Summed over the families when no label is asked for.
		{"kubeproxy_sync_proxy_rules_duration_seconds_count", nil, 13},
	} {
		got, ok := m.Value(c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v, %v; want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := m.Value("kubeproxy_sync_proxy_rules_last_timestamp_seconds", map[string]string{labelFamily: "IPv6"}); ok {
		t.Errorf("found a sample with a label value that is not served")
	}
}

func TestParseMetricsErrors(t *testing.T) {
	for _, in := range []string{
		"novalue",
		`m{a="1"`,
		`m{a=1} 3`,
		`m{a="1" b="2"} 3`,
		`m{a} 3`,
		"m 1 2 3",
		"m one",
		`m{a="unterminated} 1`,
	} {
		if _, err := ParseMetrics(in); err == nil {
			t.Errorf("ParseMetrics(%q) succeeded, want an error", in)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	m, err := ParseMetrics(scrape)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := m.Histogram(metricSyncDuration, ipv4)
	if !ok {
		t.Fatal("no IPv4 sync histogram")
	}
	if h.Count != 8 || h.Sum != 0.0213 || len(h.Bounds) != 4 || !math.IsInf(h.Bounds[3], 1) {
		t.Fatalf("histogram %+v", h)
	}
	for _, c := range []struct {
		name string
		q    float64
		want float64
	}{
		// rank 4: bucket (0.002, 0.004] holds ranks 3..7, so 0.002 + 0.002*(4-3)/4.
		{"median interpolated inside its bucket", 0.5, 0.0025},
		// rank 1.5: bucket (0.001, 0.002] holds ranks 0..3.
		{"low quantile in the first non-empty bucket", 0.1875, 0.001 + 0.001*1.5/3},
		// rank 7.92 is in +Inf: the largest finite bound is all we know.
		{"quantile in +Inf reports the last finite bound", 0.99, 0.004},
		{"q=0 is the bottom of the first non-empty bucket", 0, 0.001},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := h.Quantile(c.q); math.Abs(got-c.want) > 1e-12 {
				t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
			}
		})
	}
	if got := h.BucketAbove(0.5); got != 0.004 {
		t.Errorf("BucketAbove(0.5) = %v, want 0.004", got)
	}
	if got := h.Mean(); math.Abs(got-0.0213/8) > 1e-12 {
		t.Errorf("Mean = %v", got)
	}

	// Both families summed: 13 observations.
	both, _ := m.Histogram(metricSyncDuration, nil)
	if both.Count != 13 || both.Counts[0] != 5 || both.Counts[3] != 13 {
		t.Errorf("summed histogram %+v", both)
	}
}

func TestHistogramQuantileEmptyAndInvalid(t *testing.T) {
	empty := Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{0, 0}}
	for _, h := range []Histogram{{}, empty} {
		if got := h.Quantile(0.5); !math.IsNaN(got) {
			t.Errorf("Quantile of %+v = %v, want NaN", h, got)
		}
		if got := h.Mean(); !math.IsNaN(got) {
			t.Errorf("Mean of %+v = %v, want NaN", h, got)
		}
	}
	h := Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{1, 1}}
	for _, q := range []float64{-0.1, 1.1, math.NaN()} {
		if got := h.Quantile(q); !math.IsNaN(got) {
			t.Errorf("Quantile(%v) = %v, want NaN", q, got)
		}
	}
	onlyInf := Histogram{Bounds: []float64{math.Inf(1)}, Counts: []float64{4}}
	if got := onlyInf.Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("Quantile with only +Inf = %v, want NaN", got)
	}
}

// A phase's histogram is the difference of two scrapes; the network
// programming histogram's buckets are those of kube-proxy (0.25s, 0.5s, 1s, 2s...).
func TestHistogramSub(t *testing.T) {
	inf := math.Inf(1)
	before := Histogram{Bounds: []float64{0.25, 0.5, 1, 2, inf}, Counts: []float64{10, 10, 10, 10, 10}, Sum: 1, Count: 10}
	after := Histogram{Bounds: []float64{0.25, 0.5, 1, 2, inf}, Counts: []float64{10, 10, 30, 110, 110}, Sum: 151, Count: 110}
	d := after.Sub(before)
	if d.Count != 100 || d.Sum != 150 {
		t.Fatalf("Sub: count %v sum %v, want 100 and 150", d.Count, d.Sum)
	}
	// 20 in (0.5, 1], 80 in (1, 2]: the median is 1 + (50-20)/80.
	if got, want := d.Quantile(0.5), 1+30.0/80; math.Abs(got-want) > 1e-12 {
		t.Errorf("median = %v, want %v", got, want)
	}
	if got := d.BucketAbove(0.99); got != 2 {
		t.Errorf("p99 bucket = %v, want 2", got)
	}
	// A histogram first served after the phase started: all of it counts.
	if got := after.Sub(Histogram{}); got.Count != 110 || got.Counts[4] != 110 {
		t.Errorf("Sub(empty) = %+v", got)
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add(scrape)
	f.Add(`m{a="\\\"",b=""} -Inf`)
	f.Add("m NaN\n\n# x\n")
	f.Fuzz(func(t *testing.T, in string) {
		m, err := ParseMetrics(in)
		if err != nil {
			return
		}
		// What parsed, written back in the exposition format, parses to the
		// same samples.
		var b strings.Builder
		for _, s := range m {
			b.WriteString(s.Name)
			if len(s.Labels) > 0 {
				b.WriteString("{")
				first := true
				for k, v := range s.Labels {
					if !first {
						b.WriteString(",")
					}
					first = false
					v = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
					fmt.Fprintf(&b, "%s=\"%s\"", k, v)
				}
				b.WriteString("}")
			}
			fmt.Fprintf(&b, " %v\n", s.Value)
		}
		again, err := ParseMetrics(b.String())
		if err != nil {
			t.Fatalf("re-parsing %q: %v", b.String(), err)
		}
		if len(again) != len(m) {
			t.Fatalf("%d samples, then %d", len(m), len(again))
		}
		for i := range m {
			a, c := m[i], again[i]
			if a.Name != c.Name || len(a.Labels) != len(c.Labels) || !(a.Value == c.Value || math.IsNaN(a.Value) && math.IsNaN(c.Value)) {
				t.Fatalf("sample %d: %+v, then %+v", i, a, c)
			}
			for k, v := range a.Labels {
				if c.Labels[k] != v {
					t.Fatalf("sample %d label %s: %q, then %q", i, k, v, c.Labels[k])
				}
			}
		}
	})
}
