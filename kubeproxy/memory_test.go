package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kpng/kpng/backend"
)

// The collector's percent is lowered once, after the first sync that
// succeeded, and left alone when GOGC is set.
func TestSteadyGCAfterFirstSync(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []int
	}{
		{"GOGC unset", nil, []int{steadyGCPercent}},
		{"GOGC set", map[string]string{"GOGC": "200"}, nil},
		{"GOGC set empty", map[string]string{"GOGC": ""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var set []int
			getenv := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			var seen []uint64
			onSync := alsoOnSync(func(r backend.SyncResult) { seen = append(seen, r.Revision) }, afterFirstSync(func() {
				steadyGC(context.Background(), getenv, func(p int) int { set = append(set, p); return 100 })
			}))
			onSync(backend.SyncResult{Revision: 1, Err: errors.New("refused")})
			if len(set) != 0 {
				t.Fatalf("set after a failed first sync: %v", set)
			}
			onSync(backend.SyncResult{Revision: 1})
			onSync(backend.SyncResult{Revision: 2})
			if !slices.Equal(set, tc.want) {
				t.Errorf("collector percent set to %v, want %v", set, tc.want)
			}
			if len(seen) != 3 {
				t.Errorf("the wrapped OnSync saw %v, want every sync", seen)
			}
		})
	}
	// Without an OnSync of its own, the hook still runs.
	n := 0
	onSync := alsoOnSync(nil, afterFirstSync(func() { n++ }))
	onSync(backend.SyncResult{})
	onSync(backend.SyncResult{})
	if n != 1 {
		t.Errorf("hook ran %d times, want 1", n)
	}
}

// A sync's garbage is returned to the kernel after a sync that rewrote the
// whole dataplane or changed largeSync services, and not after the
// incremental syncs of a few changes, which free little.
func TestReleaseAfterLargeSync(t *testing.T) {
	keys := func(n int) []backend.ServiceKey {
		k := make([]backend.ServiceKey, n)
		for i := range k {
			k[i] = backend.ServiceKey{Namespace: "ns", Name: fmt.Sprint("s", i)}
		}
		return k
	}
	for _, tc := range []struct {
		name string
		res  backend.SyncResult
		want int
	}{
		{"cold sync", backend.SyncResult{Full: true, Changes: backend.Changes{Reset: true}}, 1},
		{"one service changed", backend.SyncResult{Changes: backend.Changes{Set: keys(1)}}, 0},
		{"periodic sync, the dataplane intact", backend.SyncResult{Changes: backend.Changes{Resync: true}}, 0},
		{"full resync", backend.SyncResult{Full: true, Changes: backend.Changes{Resync: true}}, 1},
		{"a batch of largeSync services", backend.SyncResult{Changes: backend.Changes{Set: keys(largeSync)}}, 1},
		{"a batch of one fewer", backend.SyncResult{Changes: backend.Changes{Set: keys(largeSync - 1)}}, 0},
		{"set and deleted together", backend.SyncResult{Changes: backend.Changes{Set: keys(largeSync / 2), Deleted: keys(largeSync - largeSync/2)}}, 1},
		{"a failed full sync", backend.SyncResult{Full: true, Changes: backend.Changes{Reset: true}, Err: errors.New("refused")}, 0},
	} {
		released := 0
		releaseAfterLargeSync(func() { released++ })(tc.res)
		if released != tc.want {
			t.Errorf("%s: memory released %d times, want %d", tc.name, released, tc.want)
		}
	}
}
