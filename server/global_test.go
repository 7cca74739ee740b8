package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
	"github.com/kpng/kpng/source/remote"
)

// dump lists every object of a store by kind and key.
func dump(s *cluster.Store) map[string]proto.Message {
	out := map[string]proto.Message{}
	s.View(func(r cluster.Reader) {
		r.ServiceKeys(func(k string) {
			if svc := r.Service(k); svc != nil {
				out["service "+k] = svc
			}
			for _, sl := range r.EndpointSlices(k) {
				out["slice "+sl.Namespace+"/"+sl.Name+" of "+k] = sl
			}
		})
		r.Nodes(func(n *globalv1.Node) { out["node "+n.Name] = n })
		r.ServiceCIDRs(func(c *globalv1.ServiceCIDR) { out["cidr "+c.Name] = c })
	})
	return out
}

func sameObjects(a, b map[string]proto.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for k, m := range a {
		if !proto.Equal(m, b[k]) {
			return false
		}
	}
	return true
}

// waitStore waits until copy holds exactly the objects of orig.
func waitStore(t *testing.T, copy, orig *cluster.Store) {
	t.Helper()
	want := dump(orig)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	var rev uint64
	for !sameObjects(dump(copy), want) {
		var err error
		if rev, err = copy.Wait(ctx, rev); err != nil {
			t.Fatalf("the copy never matched: %d objects, want %d", len(dump(copy)), len(want))
		}
	}
}

// runRemote runs a remote source into a new store.
func runRemote(t *testing.T, addr string) *cluster.Store {
	t.Helper()
	store := cluster.NewStore()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	src := &remote.Source{Target: addr, Options: []client.Option{client.WithInsecure(), client.WithBackoff(10e6, 100e6)}}
	go func() { done <- src.Run(ctx, store) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return store
}

// globalChurn adds what churn does not: a slice moving to another service,
// a node and a CIDR deleted.
func globalChurn(store *cluster.Store, round int) {
	churn(store, round)
	store.Update(func(tx *cluster.Tx) {
		sl := slice(20+round, 2, 0)
		sl.ServiceName = fmt.Sprintf("svc-%d", 40+round) // moves to another service
		tx.SetEndpointSlice(sl)
		if round == 5 {
			tx.DeleteNode("node-2")
			tx.DeleteServiceCIDR("kubernetes")
		}
	})
}

func TestRemoteSourceCopiesTheCluster(t *testing.T) {
	orig := newCluster(60, 3)
	ts := serve(t, orig, "unix", server.Options{}, server.ListenOptions{})
	copy := runRemote(t, ts.addr)
	waitStore(t, copy, orig)
	for round := range 10 {
		globalChurn(orig, round)
	}
	waitStore(t, copy, orig)

	// The server restarts while the cluster changes: a reset, and the copy
	// drops what the new state no longer has.
	ts.stop()
	orig.Update(func(tx *cluster.Tx) {
		for i := range 30 {
			tx.DeleteService("ns", service(i).Name)
			tx.DeleteEndpointSlice("ns", slice(i, 1, 0).Name)
		}
	})
	serve(t, orig, ts.addr, server.Options{}, server.ListenOptions{})
	waitStore(t, copy, orig)
}

func TestTiersChain(t *testing.T) {
	// kpng kube to-api  <-  kpng api to-api  <-  kpng local to-X
	orig := newCluster(40, 3)
	top := serve(t, orig, "unix", server.Options{}, server.ListenOptions{})
	mid := runRemote(t, top.addr)
	waitStore(t, mid, orig)
	edge := serve(t, mid, "tcp", server.Options{}, server.ListenOptions{})
	f := newFeed(t, edge.addr, "node-1")
	waitFor(t, f, brainState(orig, "node-1"))
	for round := range 6 {
		globalChurn(orig, round)
	}
	waitFor(t, f, brainState(orig, "node-1"))
}

func TestGlobalResumeSendsOnlyTheDiff(t *testing.T) {
	orig := newCluster(10, 2)
	ts := serve(t, orig, "unix", server.Options{}, server.ListenOptions{})
	conn, err := client.Dial(ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	batch := func(instance, revision uint64) ([]string, *globalv1.Sync) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		st, err := globalv1.NewWatchClient(conn).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&globalv1.WatchRequest{InstanceId: instance, Revision: revision}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for {
			m, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range m.Ops {
				switch o := op.Op.(type) {
				case *globalv1.Op_Sync:
					return names, o.Sync
				case *globalv1.Op_Reset_:
					names = append(names, "reset")
				case *globalv1.Op_SetService:
					names = append(names, "set_service "+o.SetService.Name)
				case *globalv1.Op_DeleteService:
					names = append(names, "delete_service "+o.DeleteService.Name)
				case *globalv1.Op_SetEndpointSlice:
					names = append(names, "set_endpoint_slice "+o.SetEndpointSlice.Name+" of "+o.SetEndpointSlice.ServiceName)
				case *globalv1.Op_DeleteEndpointSlice:
					names = append(names, "delete_endpoint_slice "+o.DeleteEndpointSlice.Name)
				case *globalv1.Op_SetNode:
					names = append(names, "set_node "+o.SetNode.Name)
				case *globalv1.Op_DeleteNode:
					names = append(names, "delete_node "+o.DeleteNode.Name)
				case *globalv1.Op_SetServiceCidr:
					names = append(names, "set_service_cidr "+o.SetServiceCidr.Name)
				case *globalv1.Op_DeleteServiceCidr:
					names = append(names, "delete_service_cidr "+o.DeleteServiceCidr.Name)
				}
			}
		}
	}
	ops, sync := batch(0, 0)
	if len(ops) != 1+3+1+10*2 || ops[0] != "reset" {
		t.Fatalf("first batch: %d ops, want a reset, 3 nodes, a CIDR and 10 services with a slice each", len(ops))
	}
	orig.Update(func(tx *cluster.Tx) {
		sl := slice(3, 2, 0)
		sl.ServiceName = "svc-4" // the slice moves
		tx.SetEndpointSlice(sl)
		tx.DeleteService("ns", "svc-5")
		tx.DeleteNode("node-2")
	})
	orig.Update(func(tx *cluster.Tx) {
		tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "v6", Cidrs: []string{"fd00::/108"}})
	})
	for {
		ops, sync2 := batch(sync.InstanceId, sync.Revision)
		if !slices.Contains(ops, "set_service_cidr v6") {
			continue // the server had seen the first update only; ask again from the same point
		}
		want := []string{"delete_node node-2", "set_service_cidr v6", "delete_service svc-5", "set_endpoint_slice svc-3-abcde of svc-4"}
		slices.Sort(want)
		slices.Sort(ops)
		if !slices.Equal(ops, want) {
			t.Errorf("resumed batch: %q, want %q", ops, want)
		}
		if sync2.InstanceId != sync.InstanceId {
			t.Errorf("instance changed: %v, %v", sync2, sync)
		}
		break
	}
}
