package server

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
)

// viewNodes lists the nodes whose views the server keeps.
func viewNodes(s *Server) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for opts := range maps.Keys(s.views) {
		out = append(out, opts.NodeName)
	}
	slices.Sort(out)
	return out
}

// The node views are bounded: at the bound, a new node takes the place of
// the view unwatched for longest; when every view is watched, it is refused
// with ResourceExhausted, naming the option to raise.
func TestNodeViewsAreBounded(t *testing.T) {
	store := cluster.NewStore()
	store.MarkSynced()
	s := New(store, Options{MaxNodeViews: 2, IdleViewTimeout: time.Hour})
	life, stop := context.WithCancel(context.Background())
	defer stop()
	s.ctx = life
	node := func(name string) brain.Options { return brain.Options{NodeName: name} }
	acquire := func(name string) *nodeView {
		t.Helper()
		v, err := s.acquireView(node(name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	refused := func(name string) {
		t.Helper()
		_, err := s.acquireView(node(name))
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-node-views") {
			t.Fatalf("%s: %v, want ResourceExhausted naming --max-node-views", name, err)
		}
	}

	v0, v1 := acquire("node-0"), acquire("node-1")
	acquire("node-1") // a second watcher of a kept view needs no room
	refused("node-2")
	if got := viewNodes(s); !slices.Equal(got, []string{"node-0", "node-1"}) {
		t.Fatalf("views of %v after a refusal", got)
	}

	s.releaseView(node("node-0"), v0)
	v2 := acquire("node-2") // takes the unwatched node-0's place
	if got := viewNodes(s); !slices.Equal(got, []string{"node-1", "node-2"}) {
		t.Fatalf("views of %v, want node-0's dropped for node-2", got)
	}
	refused("node-0")

	// node-1 has two watchers: it is unwatched only when both left.
	s.releaseView(node("node-1"), v1)
	refused("node-3")
	s.releaseView(node("node-1"), v1)
	s.releaseView(node("node-2"), v2)
	acquire("node-3") // node-1 has been unwatched longest
	if got := viewNodes(s); !slices.Equal(got, []string{"node-2", "node-3"}) {
		t.Fatalf("views of %v, want node-1's dropped for node-3", got)
	}
	// A kept view comes back to use without room.
	acquire("node-2")
	if got := viewNodes(s); !slices.Equal(got, []string{"node-2", "node-3"}) {
		t.Fatalf("views of %v", got)
	}
}
