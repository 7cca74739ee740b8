//go:build e2e

package netlab

import (
	"strings"
	"testing"
)

// The lines below are shaped as kpng --v=2 prints them (klog's text
// format), with the prefixes shortened.
func TestKpngApplied(t *testing.T) {
	const (
		load3   = `I] "Loaded" services=2 endpointSlices=2 nodes=2 problems=0 digest="aaaaaaaaaaaa" clusterRevision=3` + "\n"
		view3   = `I] "Node view changed" events=9 clusterRevision=3 viewRevision=3 recomputed=1 set=1 deleted=0` + "\n"
		sync3   = `I] "Dataplane synced" revision=3 changes="reset=false resync=false node=false set=1 deleted=0" took="2ms"` + "\n"
		load4   = `I] "Loaded" services=2 endpointSlices=2 nodes=2 problems=0 digest="bbbbbbbbbbbb" clusterRevision=4` + "\n"
		view4   = `I] "Node view changed" events=11 clusterRevision=4 viewRevision=4 recomputed=1 set=1 deleted=0` + "\n"
		same4   = `I] "Node view unchanged" clusterRevision=4 viewRevision=3` + "\n"
		resync3 = `I] "Dataplane synced" revision=3 changes="reset=false resync=true node=false set=0 deleted=0" took="1.55s"` + "\n"
		sync4   = `I] "Dataplane synced" revision=4 changes="reset=false resync=false node=false set=1 deleted=0" took="3ms"` + "\n"
		again4  = `I] "Dataplane synced again" revision=4 failures=2 took="9ms"` + "\n"
	)
	before := load3 + view3 + sync3
	for _, c := range []struct {
		name  string
		after string // printed after the write of content "bbbbbbbbbbbb"
		want  bool
	}{
		{"not loaded yet", resync3, false},
		// The failure this replaces the first-sync-after-"Loaded" rule
		// for: a periodic sync of the previous view ended after the load.
		{"a sync of the previous view after the load", load4 + resync3, false},
		{"view computed, not synced", load4 + resync3 + view4, false},
		{"synced", load4 + resync3 + view4 + sync4, true},
		{"the feed's line before the source's", view4 + load4 + sync4, true},
		{"synced after failures", load4 + view4 + again4, true},
		{"the view left as it was, synced before the write", load4 + same4, true},
		{"another content loaded", strings.ReplaceAll(load4, "bbbb", "cccc") + view4 + sync4, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := KpngApplied(before+c.after, len(before), "bbbbbbbbbbbb"); got != c.want {
				t.Errorf("KpngApplied = %v, want %v; output:\n%s", got, c.want, before+c.after)
			}
		})
	}
	// The same content written again after another: only its load after
	// the write counts, not the earlier one's revision.
	again := load3 + view3 + sync3 + load4 + view4 + sync4
	reload3 := strings.ReplaceAll(load3, "=3", "=5")
	if KpngApplied(again+reload3, len(again), "aaaaaaaaaaaa") {
		t.Error("KpngApplied took the view of the content's earlier load for its new one")
	}
	if !KpngApplied(again+reload3+`I] "Node view changed" events=13 clusterRevision=5 viewRevision=5 recomputed=1 set=1 deleted=0`+"\n"+
		`I] "Dataplane synced" revision=5 changes="reset=false resync=false node=false set=1 deleted=0" took="3ms"`+"\n", len(again), "aaaaaaaaaaaa") {
		t.Error("KpngApplied missed the sync of the content's new load")
	}
}
