package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The metric names read from every proxy: kube-proxy's, which kpng's
// backends share (proxyutil/metrics).
const (
	metricSyncDuration   = "kubeproxy_sync_proxy_rules_duration_seconds"
	metricNetProg        = "kubeproxy_network_programming_duration_seconds"
	metricPartialSync    = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	metricLastSync       = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	metricEndpointsPend  = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
	metricServicesPend   = "kubeproxy_sync_proxy_rules_service_changes_pending"
	labelFamily          = "ip_family"
	familyIPv4           = "IPv4"
	bucketSuffix         = "_bucket"
	sumSuffix            = "_sum"
	countSuffix          = "_count"
	bucketUpperBoundName = "le"
)

// Sample is one line of the Prometheus text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is one scrape: every sample, in the order served.
type Metrics []Sample

// ParseMetrics parses the Prometheus text exposition format (version 0.0.4),
// which kube-proxy and kpng serve: comments and blank lines are skipped,
// each other line is `name{label="value",...} value [timestamp]`.
func ParseMetrics(text string) (Metrics, error) {
	var out Metrics
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.Name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		var err error
		rest, err = parseLabels(rest[1:], s.Labels)
		if err != nil {
			return s, fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 || len(f) > 2 {
		return s, fmt.Errorf("%s: want a value and an optional timestamp, got %q", s.Name, rest)
	}
	v, err := parseValue(f[0])
	if err != nil {
		return s, fmt.Errorf("%s: %w", s.Name, err)
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `k="v",...}` into labels and returns what follows the
// closing brace. Values may hold escaped backslashes, quotes and newlines.
func parseLabels(in string, labels map[string]string) (string, error) {
	for {
		in = strings.TrimLeft(in, " \t")
		if strings.HasPrefix(in, "}") {
			return in[1:], nil
		}
		eq := strings.IndexByte(in, '=')
		if eq <= 0 {
			return "", fmt.Errorf("label without '=' in %q", in)
		}
		name := strings.TrimSpace(in[:eq])
		in = strings.TrimLeft(in[eq+1:], " \t")
		if !strings.HasPrefix(in, `"`) {
			return "", fmt.Errorf("label %s: value not quoted", name)
		}
		var b strings.Builder
		i := 1
		for ; i < len(in) && in[i] != '"'; i++ {
			c := in[i]
			if c == '\\' && i+1 < len(in) {
				i++
				switch in[i] {
				case 'n':
					c = '\n'
				default:
					c = in[i]
				}
			}
			b.WriteByte(c)
		}
		if i >= len(in) {
			return "", fmt.Errorf("label %s: unterminated value", name)
		}
		labels[name] = b.String()
		in = strings.TrimLeft(in[i+1:], " \t")
		if strings.HasPrefix(in, ",") {
			in = in[1:]
		} else if !strings.HasPrefix(in, "}") {
			return "", fmt.Errorf("label %s: want ',' or '}' after the value", name)
		}
	}
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("value %q: %w", s, err)
	}
	return v, nil
}

// matches reports whether s carries every label of want.
func (s Sample) matches(want map[string]string) bool {
	for k, v := range want {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// Value returns the sum of the samples called name that carry the labels
// of want (a gauge or counter, summed over the other labels), and whether
// there was any.
func (m Metrics) Value(name string, want map[string]string) (float64, bool) {
	var sum float64
	found := false
	for _, s := range m {
		if s.Name == name && s.matches(want) {
			sum += s.Value
			found = true
		}
	}
	return sum, found
}

// Histogram is a Prometheus histogram: cumulative bucket counts by upper
// bound, and the sum and count of the observations.
type Histogram struct {
	// Bounds are the buckets' upper bounds, increasing, +Inf last.
	Bounds []float64
	// Counts are the cumulative counts of the buckets of Bounds.
	Counts []float64
	Sum    float64
	Count  float64
}

// Histogram returns the histogram called name, summed over the series that
// carry the labels of want (kube-proxy's and kpng's histograms have at most
// an ip_family label), and whether it was served.
func (m Metrics) Histogram(name string, want map[string]string) (Histogram, bool) {
	var h Histogram
	byBound := map[float64]float64{}
	found := false
	for _, s := range m {
		if !s.matches(want) {
			continue
		}
		switch s.Name {
		case name + bucketSuffix:
			le, err := parseValue(s.Labels[bucketUpperBoundName])
			if err != nil {
				continue
			}
			byBound[le] += s.Value
			found = true
		case name + sumSuffix:
			h.Sum += s.Value
		case name + countSuffix:
			h.Count += s.Value
		}
	}
	for b := range byBound {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, byBound[b])
	}
	return h, found
}

// Sub returns the observations of h made since before: the histogram of a
// phase, from scrapes at its start and end. Buckets missing from before
// count as empty.
func (h Histogram) Sub(before Histogram) Histogram {
	prev := map[float64]float64{}
	for i, b := range before.Bounds {
		prev[b] = before.Counts[i]
	}
	d := Histogram{Sum: h.Sum - before.Sum, Count: h.Count - before.Count}
	for i, b := range h.Bounds {
		d.Bounds = append(d.Bounds, b)
		d.Counts = append(d.Counts, h.Counts[i]-prev[b])
	}
	return d
}

// Mean is the mean observation, or NaN without any.
func (h Histogram) Mean() float64 {
	if h.Count <= 0 {
		return math.NaN()
	}
	return h.Sum / h.Count
}

// Quantile estimates the q-quantile (0 <= q <= 1) as Prometheus'
// histogram_quantile does: it finds the bucket holding the rank q*count and
// interpolates linearly inside it (from 0 for the first bucket). A rank in
// the +Inf bucket returns the largest finite bound: the estimate is then a
// lower bound. NaN without observations.
func (h Histogram) Quantile(q float64) float64 {
	if len(h.Bounds) == 0 || q < 0 || q > 1 || math.IsNaN(q) {
		return math.NaN()
	}
	total := h.Counts[len(h.Counts)-1]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if i >= len(h.Bounds) {
		i = len(h.Bounds) - 1
	}
	if math.IsInf(h.Bounds[i], 1) {
		// Above the last finite bound: report that bound.
		if i == 0 {
			return math.NaN()
		}
		return h.Bounds[i-1]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.Bounds[i-1], h.Counts[i-1]
	}
	inBucket := h.Counts[i] - below
	if inBucket <= 0 {
		return h.Bounds[i]
	}
	return lower + (h.Bounds[i]-lower)*(rank-below)/inBucket
}

// BucketAbove returns the upper bound of the bucket that holds the
// q-quantile: what the histogram can promise ("at most"), given its
// resolution.
func (h Histogram) BucketAbove(q float64) float64 {
	if len(h.Bounds) == 0 || h.Counts[len(h.Counts)-1] <= 0 {
		return math.NaN()
	}
	rank := q * h.Counts[len(h.Counts)-1]
	i := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if i >= len(h.Bounds) {
		i = len(h.Bounds) - 1
	}
	return h.Bounds[i]
}
