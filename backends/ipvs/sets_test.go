package ipvs

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestFullSetScriptSwapsEachSetIn: a full sync refills every set aside and
// swaps it in, so that no set is ever empty in between (a packet would
// miss its service), and leaves exactly the wanted members, whatever the
// kernel held, a temporary set left by a failed restore included.
func TestFullSetScriptSwapsEachSetIn(t *testing.T) {
	k := newFakeKernel()
	k.sets["KPNG-CLUSTER-IP"] = map[string]bool{"10.96.0.10,tcp:80": true, "10.96.0.99,tcp:80": true}
	k.sets["KPNG-TMP"] = map[string]bool{"stale": true}
	entries := map[setEntry]int{
		{Set: setClusterIP, Entry: "10.96.0.10,tcp:80"}: 1,
		{Set: setClusterIP, Entry: "10.96.0.11,udp:53"}: 1,
		{Set: setIPVSIPs, Entry: "10.96.0.10"}:          1,
	}
	existing, _ := k.ipsets(context.Background())
	script := string(fullSetScript(false, entries, existing))
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "flush ") || (strings.HasPrefix(line, "add KPNG-") && !strings.HasPrefix(line, "add KPNG-TMP ")) {
			t.Errorf("a set is changed in place: %q", line)
		}
	}
	if err := k.ipsetRestore(context.Background(), []byte(script)); err != nil {
		t.Fatal(err)
	}
	if got, want := k.members("KPNG-CLUSTER-IP"), []string{"10.96.0.10,tcp:80", "10.96.0.11,udp:53"}; !slices.Equal(got, want) {
		t.Errorf("KPNG-CLUSTER-IP: %v, want %v", got, want)
	}
	if got := k.members("KPNG-IPVS-IPS"); !slices.Equal(got, []string{"10.96.0.10"}) {
		t.Errorf("KPNG-IPVS-IPS: %v", got)
	}
	if _, ok := k.sets["KPNG-TMP"]; ok {
		t.Error("the temporary set is left behind")
	}
	if len(k.sets) != len(setTypes) {
		t.Errorf("%d sets, want %d", len(k.sets), len(setTypes))
	}
}
