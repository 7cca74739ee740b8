package kubeproxy

import (
	"context"
	"errors"
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
