//go:build e2e

package faults

import (
	"strings"
	"testing"
	"time"
)

// A row's verdict: a problem fails it, a known gap is said as such, and
// docs/reliability.md explains the ebpf rows and the gaps only when it
// has them.
func TestVerdictAndProse(t *testing.T) {
	nft, ebpf := variant{name: "nft", backend: "nft"}, variant{name: "ebpf", backend: "ebpf"}
	cases := []struct {
		name string
		r    row
		want string
	}{
		{"no problem", row{variant: nft}, "pass"},
		{"a problem", row{variant: nft, problems: []string{"repair took 2s (> 1s)"}}, "FAIL: repair took 2s (> 1s)"},
		{"a known gap", row{variant: ebpf, gap: "not repaired"}, "known gap: not repaired"},
		{"a problem beside a known gap", row{variant: ebpf, gap: "not repaired", problems: []string{"no probe ran"}}, "FAIL: no probe ran"},
	}
	for _, c := range cases {
		if got := c.r.verdict(); got != c.want {
			t.Errorf("%s: verdict %q, want %q", c.name, got, c.want)
		}
	}

	tb := &table{}
	tb.add(row{variant: nft, fault: "table deleted"})
	md := tb.markdown(time.Minute)
	if strings.Contains(md, "ebpf backend") || strings.Contains(md, "known gap") {
		t.Errorf("a table without ebpf rows or gaps explains them:\n%s", md)
	}
	tb.add(row{variant: ebpf, fault: "pinned links removed", gap: "not repaired"})
	md = tb.markdown(time.Minute)
	for _, want := range []string{"kpng's ebpf backend runs in a lab with a cgroup v2 per node", `A "known gap"`,
		"| table deleted | 0 / 0; **pass** | n/a |", "| pinned links removed | n/a | 0 / 0; **known gap: not repaired** |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the table lacks %q:\n%s", want, md)
		}
	}
}

// The page says how loaded the machine was while the faults ran.
func TestTableSaysTheLoad(t *testing.T) {
	if got := loadRange([]float64{12.5, 3.25, 20}); got != "; 1-minute load average 3.2 to 20.0 as the faults ended" {
		t.Errorf("loadRange = %q", got)
	}
	if got := loadRange(nil); got != "" {
		t.Errorf("loadRange of nothing = %q, want nothing", got)
	}
	tb := &table{}
	tb.add(row{variant: variant{name: "nft", backend: "nft"}, fault: "table deleted"})
	if md := tb.markdown(time.Minute); !strings.Contains(md, "load average") {
		t.Errorf("the page does not say the load:\n%s", md)
	}
}
