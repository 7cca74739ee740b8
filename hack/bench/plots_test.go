package main

import (
	"math"
	"slices"
	"testing"

	"gonum.org/v1/plot"
)

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t.Label)
		}
	}
	return out
}

// Every y range the report draws gets at least three labelled ticks (four when the range allows), all
// within the range, in plain decimals; the old plot.LogTicks labelled only
// powers of ten, so a range inside one decade had none.
func TestLabelledLogTicks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		min, max float64
		want     []string // nil: only check the invariants
	}{
		{"connect times within one decade", 58 / 1.4, 97 * 1.4, []string{"50", "60", "70", "80", "90", "100", "120"}},
		{"RSS of four proxies", 71 / 1.4, 120 * 1.4, []string{"60", "70", "80", "90", "100", "120", "150"}},
		{"sync durations over three decades", 0.003 / 1.4, 1 * 1.4, []string{"0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1"}},
		{"over many decades: powers of ten", 0.0001, 1000, []string{"0.0001", "0.001", "0.01", "0.1", "1", "10", "100", "1,000"}},
		{"one value, padded as logRange does", 2.73 / 1.5, 2.73 * 1.5, []string{"2", "2.5", "3", "4"}},
		{"thousands", 7464 / 1.4, 12903 * 1.4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ticks := labelledLogTicks{}.Ticks(tc.min, tc.max)
			got := labels(ticks)
			if len(got) < 3 {
				t.Errorf("labels %v: want at least 3", got)
			}
			if tc.want != nil && !slices.Equal(got, tc.want) {
				t.Errorf("labels %v, want %v", got, tc.want)
			}
			for i, tk := range ticks {
				if tk.Value < tc.min*(1-1e-9) || tk.Value > tc.max*(1+1e-9) {
					t.Errorf("tick %v outside [%v, %v]", tk.Value, tc.min, tc.max)
				}
				if i > 0 && !(ticks[i-1].Value < tk.Value) {
					t.Errorf("ticks not strictly increasing at %v", tk.Value)
				}
			}
		})
	}
	if ticks := (labelledLogTicks{}).Ticks(0, 1); ticks != nil {
		t.Errorf("a range from 0 has no log ticks, got %v", ticks)
	}
}

func TestTickLabel(t *testing.T) {
	for _, tc := range []struct {
		m    float64
		e    int
		want string
	}{
		{3, -1, "0.3"}, {1.5, -3, "0.0015"}, {1.5, 0, "1.5"}, {1.5, 1, "15"}, {2.5, 3, "2,500"}, {1, 6, "1,000,000"}, {7, -2, "0.07"},
	} {
		if got := tickLabel(tc.m, tc.e); got != tc.want {
			t.Errorf("tickLabel(%v, %d) = %q, want %q", tc.m, tc.e, got, tc.want)
		}
	}
}

func TestLogRangeHoldsEveryPointWithRoom(t *testing.T) {
	lo, hi := logRange([]point{{value: 3}, {value: 40}, {value: 0.5}})
	if !(lo < 0.5 && hi > 40) || math.IsInf(lo, 0) {
		t.Errorf("range [%v, %v] for points 0.5 to 40", lo, hi)
	}
}

// Whatever single value a plot holds, the range logRange puts around it
// has three labelled ticks or more.
func TestEveryPaddedRangeIsLabelled(t *testing.T) {
	for v := 0.001; v < 1e6; v *= 1.037 {
		lo, hi := logRange([]point{{value: v}})
		if got := labels(labelledLogTicks{}.Ticks(lo, hi)); len(got) < 3 {
			t.Fatalf("value %v: range [%v, %v] has labels %v", v, lo, hi, got)
		}
	}
}

func TestLabelledLinearTicks(t *testing.T) {
	for _, tc := range []struct {
		min, max float64
		want     []string
	}{
		{0, 300, []string{"0", "50", "100", "150", "200", "250", "300"}},
		{0, 14000, []string{"0", "2,000", "4,000", "6,000", "8,000", "10,000", "12,000", "14,000"}},
		{0, 0.9, []string{"0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9"}},
		{0, 10500, []string{"0", "2,000", "4,000", "6,000", "8,000", "10,000"}},
		{0, 69, []string{"0", "10", "20", "30", "40", "50", "60"}},
	} {
		if got := labels(labelledLinearTicks{}.Ticks(tc.min, tc.max)); !slices.Equal(got, tc.want) {
			t.Errorf("[%v, %v]: labels %v, want %v", tc.min, tc.max, got, tc.want)
		}
	}
}
