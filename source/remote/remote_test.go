package remote

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/client/clusterwatch"
	"github.com/kpng/kpng/cluster"
)

// contents lists what a store holds, by kind and key.
func contents(s *cluster.Store) map[string]bool {
	out := map[string]bool{}
	s.View(func(r cluster.Reader) {
		r.ServiceKeys(func(k string) {
			if r.Service(k) != nil {
				out["service "+k] = true
			}
			for _, sl := range r.EndpointSlices(k) {
				out["slice "+cluster.Key(sl.Namespace, sl.Name)] = true
			}
		})
		r.Nodes(func(n *globalv1.Node) { out["node "+n.Name] = true })
		r.ServiceCIDRs(func(c *globalv1.ServiceCIDR) { out["cidr "+c.Name] = true })
	})
	return out
}

// model applies a batch to the expected contents.
func model(want map[string]bool, b clusterwatch.Batch) {
	if b.Reset {
		clear(want)
	}
	for _, op := range b.Ops {
		switch o := op.Op.(type) {
		case *globalv1.Op_SetService:
			want["service "+cluster.Key(o.SetService.Namespace, o.SetService.Name)] = true
		case *globalv1.Op_DeleteService:
			delete(want, "service "+cluster.Key(o.DeleteService.Namespace, o.DeleteService.Name))
		case *globalv1.Op_SetEndpointSlice:
			want["slice "+cluster.Key(o.SetEndpointSlice.Namespace, o.SetEndpointSlice.Name)] = true
		case *globalv1.Op_DeleteEndpointSlice:
			delete(want, "slice "+cluster.Key(o.DeleteEndpointSlice.Namespace, o.DeleteEndpointSlice.Name))
		case *globalv1.Op_SetNode:
			want["node "+o.SetNode.Name] = true
		case *globalv1.Op_DeleteNode:
			delete(want, "node "+o.DeleteNode.Name)
		case *globalv1.Op_SetServiceCidr:
			want["cidr "+o.SetServiceCidr.Name] = true
		case *globalv1.Op_DeleteServiceCidr:
			delete(want, "cidr "+o.DeleteServiceCidr.Name)
		}
	}
}

// FuzzApply feeds the source arbitrary batches off the wire: it must never
// panic, and after each accepted batch the store holds exactly what the
// batches said (a reset drops everything it does not set).
func FuzzApply(f *testing.F) {
	seed := func(ops ...*globalv1.Op) {
		b, err := proto.Marshal(&globalv1.Ops{Ops: ops})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b, false)
	}
	svc := &globalv1.Op{Op: &globalv1.Op_SetService{SetService: &globalv1.Service{Namespace: "ns", Name: "a"}}}
	sl := &globalv1.Op{Op: &globalv1.Op_SetEndpointSlice{SetEndpointSlice: &globalv1.EndpointSlice{Namespace: "ns", Name: "a-1", ServiceName: "a"}}}
	node := &globalv1.Op{Op: &globalv1.Op_SetNode{SetNode: &globalv1.Node{Name: "n"}}}
	cidr := &globalv1.Op{Op: &globalv1.Op_SetServiceCidr{SetServiceCidr: &globalv1.ServiceCIDR{Name: "k"}}}
	seed(svc, sl, node, cidr)
	seed(sl, &globalv1.Op{Op: &globalv1.Op_DeleteService{DeleteService: &globalv1.ObjectKey{Namespace: "ns", Name: "a"}}})
	f.Fuzz(func(t *testing.T, first, second []byte, secondResets bool) {
		s := &Source{services: map[string]bool{}, slices: map[string]bool{}, nodes: map[string]bool{}, cidrs: map[string]bool{}}
		store := cluster.NewStore()
		want := map[string]bool{}
		for i, data := range [][]byte{first, second} {
			var m globalv1.Ops
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			b := clusterwatch.Batch{Reset: i == 0 || secondResets, Ops: m.Ops}
			if err := s.apply(store, b); err != nil {
				return // the stream is dropped
			}
			model(want, b)
			if got := contents(store); !maps.Equal(got, want) {
				t.Fatalf("batch %d (reset %v): store holds %v, want %v", i, b.Reset, got, want)
			}
		}
	})
}

// A batch is applied all or nothing: one with a fault leaves the store and
// the source's record of it as they were, so that a later reset still drops
// what the first batch held.
func TestFaultyBatchChangesNothing(t *testing.T) {
	s := &Source{services: map[string]bool{}, slices: map[string]bool{}, nodes: map[string]bool{}, cidrs: map[string]bool{}}
	store := cluster.NewStore()
	set := func(name string) *globalv1.Op {
		return &globalv1.Op{Op: &globalv1.Op_SetService{SetService: &globalv1.Service{Namespace: "ns", Name: name}}}
	}
	if err := s.apply(store, clusterwatch.Batch{Reset: true, Ops: []*globalv1.Op{set("a")}}); err != nil {
		t.Fatal(err)
	}
	rev := store.Stats().Revision
	for name, b := range map[string]clusterwatch.Batch{
		"a reset then an empty operation": {Reset: true, Ops: []*globalv1.Op{set("b"), {}}},
		"a set then an empty operation":   {Ops: []*globalv1.Op{set("c"), {}}},
		"a set without its object":        {Ops: []*globalv1.Op{set("d"), {Op: &globalv1.Op_SetNode{}}}},
	} {
		if err := s.apply(store, b); err == nil {
			t.Errorf("%s: applied", name)
		}
		if got := contents(store); !maps.Equal(got, map[string]bool{"service ns/a": true}) || store.Stats().Revision != rev {
			t.Errorf("%s: the store holds %v at revision %d, want only ns/a at %d", name, got, store.Stats().Revision, rev)
		}
	}
	if err := s.apply(store, clusterwatch.Batch{Reset: true, Ops: []*globalv1.Op{set("e")}}); err != nil {
		t.Fatal(err)
	}
	if got := contents(store); !maps.Equal(got, map[string]bool{"service ns/e": true}) {
		t.Errorf("after a reset, the store holds %v, want only ns/e", got)
	}
}
