package client

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

func newTestFeed() *Feed { return &Feed{state: backend.NewState("node-1")} }

func svcOp(name string) *localv1.Op {
	return &localv1.Op{Op: &localv1.Op_SetService{SetService: &localv1.Service{Namespace: "ns", Name: name, Family: localv1.IPFamily_IPV4, ClusterIp: "10.96.0.1"}}}
}

func epOp(set bool, name, ip string, ready bool) *localv1.Op {
	eo := &localv1.EndpointOp{Key: &localv1.ServiceKey{Namespace: "ns", Name: name, Family: localv1.IPFamily_IPV4},
		Endpoint: &localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_TCP, Ip: ip, Port: 8080, Ready: ready}}
	if set {
		return &localv1.Op{Op: &localv1.Op_SetEndpoint{SetEndpoint: eo}}
	}
	return &localv1.Op{Op: &localv1.Op_DeleteEndpoint{DeleteEndpoint: eo}}
}

func key(name string) backend.ServiceKey {
	return backend.ServiceKey{Namespace: "ns", Name: name, Family: localv1.IPFamily_IPV4}
}

// checkState asserts what a backend relies on in any state the feed hands
// out: every entry has its Service under its own key, endpoints sorted and
// unique; and in the changes, sorted keys, in Set or Deleted, not both.
func checkState(t *testing.T, st *backend.State, ch backend.Changes) {
	t.Helper()
	for k, se := range st.Services {
		if se.Service == nil || backend.KeyOf(se) != k {
			t.Fatalf("entry %s holds %v", k, se.Service)
		}
		for i := 1; i < len(se.Endpoints); i++ {
			if localv1.CompareEndpoints(se.Endpoints[i-1], se.Endpoints[i]) >= 0 {
				t.Fatalf("entry %s: endpoints not sorted and unique: %v", k, se.Endpoints)
			}
		}
	}
	for _, keys := range [][]backend.ServiceKey{ch.Set, ch.Deleted} {
		if !slices.IsSortedFunc(keys, backend.ServiceKey.Compare) {
			t.Fatalf("keys not sorted: %v", keys)
		}
	}
	for _, k := range ch.Set {
		if st.Services[k] == nil {
			t.Fatalf("%s set but absent", k)
		}
		if _, gone := slices.BinarySearchFunc(ch.Deleted, k, backend.ServiceKey.Compare); gone {
			t.Fatalf("%s both set and deleted", k)
		}
	}
	for _, k := range ch.Deleted {
		if st.Services[k] != nil {
			t.Fatalf("%s deleted but present", k)
		}
	}
}

func TestApply(t *testing.T) {
	f := newTestFeed()
	ch, err := f.apply(Batch{Reset: true, Revision: 1, Ops: []*localv1.Op{
		svcOp("a"), epOp(true, "a", "10.0.0.2", true), epOp(true, "a", "10.0.0.1", true),
		svcOp("b"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	checkState(t, f.state, ch)
	if !ch.Reset || !slices.Equal(ch.Set, []backend.ServiceKey{key("a"), key("b")}) || len(f.state.Services[key("a")].Endpoints) != 2 {
		t.Fatalf("after the Reset: %v %v", ch, f.state.Services)
	}
	published := f.state.Services[key("a")]

	// One endpoint changes, one goes; b goes; c comes.
	ch, err = f.apply(Batch{Revision: 2, Ops: []*localv1.Op{
		epOp(true, "a", "10.0.0.1", false), epOp(false, "a", "10.0.0.2", false),
		{Op: &localv1.Op_DeleteService{DeleteService: &localv1.ServiceKey{Namespace: "ns", Name: "b", Family: localv1.IPFamily_IPV4}}},
		svcOp("c"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	checkState(t, f.state, ch)
	if ch.Reset || !slices.Equal(ch.Set, []backend.ServiceKey{key("a"), key("c")}) || !slices.Equal(ch.Deleted, []backend.ServiceKey{key("b")}) {
		t.Errorf("changes: %v set %v deleted %v", ch, ch.Set, ch.Deleted)
	}
	if eps := f.state.Services[key("a")].Endpoints; len(eps) != 1 || eps[0].Ip != "10.0.0.1" || eps[0].Ready {
		t.Errorf("a's endpoints: %v", eps)
	}
	// A published entry is never modified: a backend may keep it.
	if len(published.Endpoints) != 2 || !published.Endpoints[0].Ready {
		t.Errorf("the entry of revision 1 was modified: %v", published.Endpoints)
	}
	if f.state.Revision != 2 {
		t.Errorf("revision %d, want 2", f.state.Revision)
	}
}

func TestApplyProtocolErrors(t *testing.T) {
	for name, ops := range map[string][]*localv1.Op{
		"endpoint of an unknown service": {epOp(true, "x", "10.0.0.1", true)},
		"set_endpoint without endpoint":  {svcOp("a"), {Op: &localv1.Op_SetEndpoint{SetEndpoint: &localv1.EndpointOp{}}}},
		"a sync inside a batch":          {{Op: &localv1.Op_Sync{Sync: &localv1.Sync{}}}},
		"an empty operation":             {{}},
	} {
		if _, err := newTestFeed().apply(Batch{Ops: ops}); err == nil {
			t.Errorf("%s: applied", name)
		}
	}
}

// FuzzApply feeds the client arbitrary batches off the wire: it must
// never panic, and a batch it accepts leaves a state a backend can trust.
func FuzzApply(f *testing.F) {
	seed := func(ops ...*localv1.Op) {
		b, err := proto.Marshal(&localv1.Ops{Ops: ops})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b, true)
	}
	seed(svcOp("a"), epOp(true, "a", "10.0.0.1", true), epOp(false, "a", "10.0.0.1", true))
	seed(svcOp("b"), &localv1.Op{Op: &localv1.Op_SetTriggerTime{SetTriggerTime: &localv1.TriggerTime{Key: &localv1.ServiceKey{Namespace: "ns", Name: "b", Family: localv1.IPFamily_IPV4}, UnixNano: 5}}},
		&localv1.Op{Op: &localv1.Op_SetNode{SetNode: &localv1.NodeInfo{Node: &localv1.Node{Name: "node-1"}}}})
	f.Fuzz(func(t *testing.T, first, second []byte, reset bool) {
		feed := newTestFeed()
		for i, data := range [][]byte{first, second} {
			var m localv1.Ops
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			ch, err := feed.apply(Batch{Ops: m.Ops, Reset: reset || i == 0, Revision: uint64(i + 1)})
			if err != nil {
				return // the stream is dropped; nothing is handed out
			}
			checkState(t, feed.state, ch)
		}
	})
}

// A batch is applied all or nothing: one that fails leaves the state (and
// its revision) exactly as it was, whatever it did before the fault.
func TestApplyFailedBatchLeavesStateUnchanged(t *testing.T) {
	node := &localv1.Op{Op: &localv1.Op_SetNode{SetNode: &localv1.NodeInfo{Node: &localv1.Node{Name: "node-1", Zone: "z2"}, ServiceCidrs: []string{"10.97.0.0/16"}}}}
	for name, b := range map[string]Batch{
		"a reset then a fault":              {Reset: true, Revision: 2, Ops: []*localv1.Op{svcOp("z"), {}}},
		"a reset then an orphan endpoint":   {Reset: true, Revision: 2, Ops: []*localv1.Op{svcOp("z"), epOp(true, "a", "10.0.0.3", true)}},
		"set_node then a fault":             {Revision: 2, Ops: []*localv1.Op{node, {Op: &localv1.Op_SetEndpoint{SetEndpoint: &localv1.EndpointOp{}}}}},
		"changes then an unknown service":   {Revision: 2, Ops: []*localv1.Op{svcOp("a"), epOp(false, "a", "10.0.0.1", true), svcOp("c"), epOp(true, "x", "10.0.0.9", true)}},
		"deletions then an unknown service": {Revision: 2, Ops: []*localv1.Op{{Op: &localv1.Op_DeleteService{DeleteService: &localv1.ServiceKey{Namespace: "ns", Name: "b", Family: localv1.IPFamily_IPV4}}}, epOp(true, "y", "10.0.0.9", true)}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newTestFeed()
			if _, err := f.apply(Batch{Reset: true, Revision: 1, Ops: []*localv1.Op{
				{Op: &localv1.Op_SetNode{SetNode: &localv1.NodeInfo{Node: &localv1.Node{Name: "node-1", Zone: "z1"}, ServiceCidrs: []string{"10.96.0.0/16"}}}},
				svcOp("a"), epOp(true, "a", "10.0.0.1", true), svcOp("b"),
			}}); err != nil {
				t.Fatal(err)
			}
			before := snapshotState(f.state)
			if _, err := f.apply(b); err == nil {
				t.Fatal("a faulty batch was applied")
			}
			if after := snapshotState(f.state); !proto.Equal(after, before) {
				t.Errorf("a failed batch changed the state:\n got %v\nwant %v", after, before)
			}
		})
	}
}

// snapshotState is a deep copy of a state, to compare.
func snapshotState(st *backend.State) *localv1.NodeState {
	return proto.Clone(&localv1.NodeState{NodeName: st.NodeName, Revision: st.Revision, Services: st.Sorted(),
		Node: st.Node, ServiceCidrs: st.ServiceCIDRs}).(*localv1.NodeState)
}
