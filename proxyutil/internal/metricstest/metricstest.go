// Package metricstest reads one metric's current value, for the proxyutil
// tests (component-base's testutil would pull in test-only modules).
package metricstest

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics"
)

func read(t testing.TB, m any) *dto.Metric {
	t.Helper()
	out := &dto.Metric{}
	w, ok := m.(interface{ Write(*dto.Metric) error })
	if !ok {
		t.Fatalf("metric %T cannot be read", m)
	}
	if err := w.Write(out); err != nil {
		t.Fatalf("read metric: %v", err)
	}
	return out
}

// Counter returns a counter's value.
func Counter(t testing.TB, m metrics.CounterMetric) float64 {
	t.Helper()
	return read(t, m).GetCounter().GetValue()
}

// Gauge returns a gauge's value.
func Gauge(t testing.TB, m metrics.GaugeMetric) float64 {
	t.Helper()
	return read(t, m).GetGauge().GetValue()
}

// HistogramCount returns how many samples a histogram holds.
func HistogramCount(t testing.TB, m metrics.ObserverMetric) uint64 {
	t.Helper()
	return read(t, m).GetHistogram().GetSampleCount()
}

// HistogramSum returns the sum of a histogram's samples.
func HistogramSum(t testing.TB, m metrics.ObserverMetric) float64 {
	t.Helper()
	return read(t, m).GetHistogram().GetSampleSum()
}
