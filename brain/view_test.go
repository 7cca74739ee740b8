package brain

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/cluster"
)

func update(v *View, s *cluster.Store) (d Diff) {
	s.View(func(r cluster.Reader) { d = v.Update(r) })
	return d
}

// testCluster builds n services with one slice each of eps endpoints,
// spread over nodes node-0..node-9 and zones zone-0..zone-2.
func testCluster(s *cluster.Store, n, eps int) {
	s.Update(func(tx *cluster.Tx) {
		for i := range n {
			tx.SetService(&globalv1.Service{
				Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), Type: globalv1.ServiceType_CLUSTER_IP,
				ClusterIps: []string{fmt.Sprintf("10.96.%d.%d", i/256, i%256)},
				Ports:      []*globalv1.ServicePort{{Name: "http", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080}},
			})
			tx.SetEndpointSlice(testSlice(i, eps, 0))
		}
		for i := range 10 {
			tx.SetNode(&globalv1.Node{Name: fmt.Sprintf("node-%d", i), Zone: fmt.Sprintf("zone-%d", i%3)})
		}
	})
	s.MarkSynced()
}

// testSlice is service i's slice; gen varies the first endpoint's readiness.
func testSlice(i, eps, gen int) *globalv1.EndpointSlice {
	sl := &globalv1.EndpointSlice{
		Namespace: "ns", Name: fmt.Sprintf("svc-%d-abcde", i), ServiceName: fmt.Sprintf("svc-%d", i),
		AddressType: globalv1.AddressType_IPV4,
		Ports:       []*globalv1.EndpointPort{{Name: proto.String("http"), Protocol: globalv1.Protocol_TCP, Port: 8080}},
	}
	for j := range eps {
		sl.Endpoints = append(sl.Endpoints, &globalv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 1+j, i/256, i%256)},
			NodeName:  fmt.Sprintf("node-%d", j%10),
			Zone:      fmt.Sprintf("zone-%d", j%3),
		})
	}
	if gen%2 == 1 {
		sl.Endpoints[0].Ready = proto.Bool(false)
	}
	return sl
}

func TestViewWaitsForSync(t *testing.T) {
	s := cluster.NewStore()
	s.Update(func(tx *cluster.Tx) { tx.SetService(svc()) })
	v := NewView(Options{NodeName: "me"})
	if d := update(v, s); !d.Empty() || v.Revision() != 0 {
		t.Fatalf("view published before the source synced: %v, rev %d", d, v.Revision())
	}
	s.MarkSynced()
	if d := update(v, s); len(d.Set) != 1 || v.Revision() != 1 {
		t.Fatalf("after sync: diff %v, rev %d", d, v.Revision())
	}
}

func TestViewRecomputesOnlyWhatChanged(t *testing.T) {
	s := cluster.NewStore()
	testCluster(s, 100, 3)
	v := NewView(Options{NodeName: "node-0"})
	update(v, s)
	before := v.Stats()
	if before.Recomputed != 100 || before.Revision != 1 {
		t.Fatalf("initial: %+v", before)
	}

	s.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(testSlice(7, 3, 1)) })
	d := update(v, s)
	after := v.Stats()
	if got := after.Recomputed - before.Recomputed; got != 1 {
		t.Errorf("one slice change recomputed %d services, want 1", got)
	}
	if len(d.Set) != 1 || d.Set[0].Service.Name != "svc-7" || len(d.Deleted) != 0 {
		t.Errorf("diff = %v", d)
	}
	if after.Revision != 2 {
		t.Errorf("revision %d, want 2", after.Revision)
	}
}

func TestViewRevisionMovesOnlyOnChange(t *testing.T) {
	s := cluster.NewStore()
	testCluster(s, 10, 3)
	v := NewView(Options{NodeName: "node-0"})
	update(v, s)

	// Another node's zone changes: the cluster changed, this view did not.
	s.Update(func(tx *cluster.Tx) { tx.SetNode(&globalv1.Node{Name: "node-5", Zone: "elsewhere"}) })
	if d := update(v, s); !d.Empty() || v.Revision() != 1 {
		t.Errorf("another node's change moved this view: %v rev %d", d, v.Revision())
	}
	// The same slice written again: no cluster revision at all.
	rev := s.Stats().Revision
	s.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(testSlice(3, 3, 0)) })
	if s.Stats().Revision != rev {
		t.Errorf("identical write moved the store revision")
	}
	// This node's own zone changes: a full recompute, but no endpoint has
	// hints, so no service changes; only the node facts do.
	s.Update(func(tx *cluster.Tx) { tx.SetNode(&globalv1.Node{Name: "node-0", Zone: "zone-9"}) })
	if d := update(v, s); len(d.Set)+len(d.Deleted) != 0 || !d.NodeChanged || v.Revision() != 2 || v.Stats().FullRecomputes != 2 {
		t.Errorf("zone change: diff %v rev %d stats %+v", d, v.Revision(), v.Stats())
	}
	// Deleting a service deletes it from the view.
	s.Update(func(tx *cluster.Tx) { tx.DeleteService("ns", "svc-1") })
	if d := update(v, s); len(d.Deleted) != 1 || d.Deleted[0].Service.Name != "svc-1" || v.Revision() != 3 {
		t.Errorf("delete: diff %v rev %d", d, v.Revision())
	}
}

// TestRevisionCountOverAStreamOfUpdates feeds API-style updates, most of
// which do not change what this node does (another node's pod readiness
// behind an ITP=Local service, status-only re-writes), and checks the view
// revision counts exactly the changes that matter to this node.
func TestRevisionCountOverAStreamOfUpdates(t *testing.T) {
	s := cluster.NewStore()
	s.Update(func(tx *cluster.Tx) {
		tx.SetService(svc(itpLocal))
		tx.SetEndpointSlice(slice("s1", ep("10.0.0.1", local)))
		tx.SetNode(&globalv1.Node{Name: "me", Zone: "zone-a"})
	})
	s.MarkSynced()
	v := NewView(Options{NodeName: "me"})
	update(v, s)

	const n = 1000
	wantRevs := uint64(1)
	localReady := true
	for i := range n {
		sl := slice("s1", ep("10.0.0.1", local))
		// Remote endpoints flap: invisible to this node under ITP=Local.
		remote := ep(fmt.Sprintf("10.0.1.%d", i%200))
		if i%2 == 1 {
			notReady(remote)
		}
		sl.Endpoints = append(sl.Endpoints, remote)
		// Every 100th update the local endpoint flips readiness.
		if i%100 == 99 {
			localReady = !localReady
			wantRevs++
		}
		if !localReady {
			terminating(sl.Endpoints[0])
		}
		s.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(sl) })
		update(v, s)
	}
	st := s.Stats()
	t.Logf("%d events in, %d cluster revisions, %d node revisions", st.Events, st.Revision, v.Revision())
	if v.Revision() != wantRevs {
		t.Errorf("node revisions = %d, want %d", v.Revision(), wantRevs)
	}
	if st.Revision < n/2 {
		t.Errorf("cluster revisions = %d: the stream should have changed the cluster almost every time", st.Revision)
	}
}

func TestViewCatchesUpAfterTheLogWraps(t *testing.T) {
	s := cluster.NewStore()
	testCluster(s, 10, 2)
	v := NewView(Options{NodeName: "node-0"})
	update(v, s)
	for i := range cluster.DefaultLogSize + 10 {
		s.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(testSlice(i%10, 2, i/10)) })
	}
	full := v.Stats().FullRecomputes
	update(v, s)
	if v.Stats().FullRecomputes != full+1 {
		t.Errorf("a view behind the log must recompute everything")
	}
	fresh := NewView(Options{NodeName: "node-0"})
	update(fresh, s)
	if !proto.Equal(v.State(), fresh.State()) {
		// Revisions differ by construction; compare services only.
		a, b := v.State(), fresh.State()
		a.Revision, b.Revision = 0, 0
		if !proto.Equal(a, b) {
			t.Errorf("caught-up view differs from a fresh one")
		}
	}
}

func BenchmarkFullView10kServices(b *testing.B) {
	s := cluster.NewStore()
	testCluster(s, 10000, 10)
	b.ReportAllocs()
	for b.Loop() {
		v := NewView(Options{NodeName: "node-0"})
		update(v, s)
	}
}

func BenchmarkOneEndpointChange10kServices(b *testing.B) {
	s := cluster.NewStore()
	testCluster(s, 10000, 10)
	v := NewView(Options{NodeName: "node-0"})
	update(v, s)
	slices := [2]*globalv1.EndpointSlice{testSlice(4242, 10, 0), testSlice(4242, 10, 1)}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		s.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slices[i%2]) })
		if d := update(v, s); len(d.Set) != 1 {
			b.Fatalf("diff %v", d)
		}
	}
}

// A trigger time travels with a change but is never a change by itself.
func TestTriggerTimeIsCarriedNotCounted(t *testing.T) {
	s := cluster.NewStore()
	testCluster(s, 3, 3)
	v := NewView(Options{NodeName: "node-0"})
	update(v, s)

	sl := testSlice(1, 3, 0)
	sl.TriggerTimeUnixNano = 1000
	s.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(sl) })
	if d := update(v, s); !d.Empty() || v.Revision() != 1 {
		t.Fatalf("a new trigger time alone changed the view: %v, rev %d", d, v.Revision())
	}

	sl = testSlice(1, 3, 1)
	sl.TriggerTimeUnixNano = 2000
	s.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(sl) })
	d := update(v, s)
	if len(d.Set) != 1 || d.Set[0].TriggerTimeUnixNano != 2000 || v.Revision() != 2 {
		t.Fatalf("a real change: diff %v, rev %d; want the entry with trigger time 2000 at rev 2", d, v.Revision())
	}
}

// The node's own facts and the service CIDRs are part of the view: a change
// of either is a change without recomputing any service; another node's is
// not a change at all.
func TestNodeFactsAndServiceCIDRs(t *testing.T) {
	s := cluster.NewStore()
	testCluster(s, 5, 3)
	v := NewView(Options{NodeName: "node-0"})
	update(v, s)
	if n := v.Node(); n == nil || n.Zone != "zone-0" {
		t.Fatalf("node facts after the first update: %v", n)
	}
	recomputed := v.Stats().Recomputed

	s.Update(func(tx *cluster.Tx) {
		tx.SetNode(&globalv1.Node{Name: "node-0", Zone: "zone-0", Addresses: []string{"192.0.2.10"}, PodCidrs: []string{"10.244.0.0/24"}})
	})
	if d := update(v, s); !d.NodeChanged || len(d.Set) != 0 || v.Revision() != 2 || v.Node().Addresses[0] != "192.0.2.10" {
		t.Errorf("address change: diff %v rev %d node %v", d, v.Revision(), v.Node())
	}
	s.Update(func(tx *cluster.Tx) {
		tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "b", Cidrs: []string{"fd00:96::/112", "10.96.0.0/16"}})
		tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "a", Cidrs: []string{"10.96.0.0/16"}})
	})
	if d := update(v, s); !d.NodeChanged || v.Revision() != 3 {
		t.Errorf("service CIDRs: diff %v rev %d", d, v.Revision())
	}
	if got := v.ServiceCIDRs(); len(got) != 2 || got[0] != "10.96.0.0/16" || got[1] != "fd00:96::/112" {
		t.Errorf("service CIDRs = %v, want the sorted union without duplicates", got)
	}
	s.Update(func(tx *cluster.Tx) { tx.SetNode(&globalv1.Node{Name: "node-3", Addresses: []string{"192.0.2.13"}}) })
	if d := update(v, s); !d.Empty() || v.Revision() != 3 {
		t.Errorf("another node moved this view: %v rev %d", d, v.Revision())
	}
	if v.Stats().Recomputed != recomputed {
		t.Errorf("node facts recomputed services: %d -> %d", recomputed, v.Stats().Recomputed)
	}
	if st := v.State(); st.Node.GetName() != "node-0" || len(st.ServiceCidrs) != 2 {
		t.Errorf("State() lacks the node facts: %v %v", st.Node, st.ServiceCidrs)
	}
}
