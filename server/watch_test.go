package server_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// rawStream is a localv1 stream driven by hand, to assert the protocol.
type rawStream struct {
	st     localv1.Watch_WatchClient
	cancel context.CancelFunc
}

func openRaw(t *testing.T, addr, node string, instance, revision uint64, opts ...client.Option) *rawStream {
	t.Helper()
	conn, err := client.Dial(addr, append([]client.Option{client.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	st, err := localv1.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&localv1.WatchRequest{NodeName: node, InstanceId: instance, Revision: revision}); err != nil {
		t.Fatal(err)
	}
	return &rawStream{st: st, cancel: cancel}
}

// batch receives one batch: its operations (Reset and Sync included) and
// its Sync.
func (r *rawStream) batch(t *testing.T) ([]*localv1.Op, *localv1.Sync) {
	t.Helper()
	var ops []*localv1.Op
	for {
		m, err := r.st.Recv()
		if err != nil {
			t.Fatalf("receiving a batch: %v", err)
		}
		ops = append(ops, m.Ops...)
		if s := ops[len(ops)-1].GetSync(); s != nil {
			return ops, s
		}
	}
}

func (r *rawStream) ask(t *testing.T) {
	t.Helper()
	if err := r.st.Send(&localv1.WatchRequest{}); err != nil {
		t.Fatal(err)
	}
}

// waitFor calls Next until the feed's state equals want.
func waitFor(t *testing.T, f *client.Feed, want *backend.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	for {
		st, _, err := f.Next(ctx)
		if err != nil {
			t.Fatalf("the feed never reached the brain's state: %v", err)
		}
		if sameState(st, want) {
			return
		}
	}
}

func newFeed(t *testing.T, addr, node string, opts ...client.Option) *client.Feed {
	t.Helper()
	f, err := client.NewFeed(addr, node, append([]client.Option{client.WithInsecure(), client.WithBackoff(10e6, 100e6)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// churn makes changes of every kind: endpoint readiness, a deleted and a
// new service, a moved node, a new service CIDR.
func churn(store *cluster.Store, round int) {
	store.Update(func(tx *cluster.Tx) {
		tx.SetEndpointSlice(slice(round%10, 3, round))
		tx.DeleteService("ns", fmt.Sprintf("svc-%d", 10+round))
		tx.SetService(service(1000 + round))
		tx.SetEndpointSlice(slice(1000+round, 2, 0))
		if round%3 == 0 {
			tx.SetNode(&globalv1.Node{Name: "node-1", Zone: fmt.Sprintf("zone-%d", round)})
			tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: fmt.Sprintf("extra-%d", round), Cidrs: []string{fmt.Sprintf("10.%d.0.0/16", 100+round)}})
		}
	})
}

func TestClientsConvergeToTheBrain(t *testing.T) {
	for _, transport := range []string{"unix", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			store := newCluster(50, 3)
			ts := serve(t, store, transport, server.Options{}, server.ListenOptions{})
			nodes := []string{"node-0", "node-1", "node-2"}
			var feeds []*client.Feed
			for _, n := range nodes {
				for range 2 { // two watchers share a node's view
					f := newFeed(t, ts.addr, n)
					waitFor(t, f, brainState(store, n))
					feeds = append(feeds, f)
				}
			}
			for round := range 20 {
				churn(store, round)
			}
			var wg sync.WaitGroup
			for i, f := range feeds {
				want := brainState(store, nodes[i/2])
				wg.Add(1)
				go func() {
					defer wg.Done()
					waitFor(t, f, want)
				}()
			}
			wg.Wait()
		})
	}
}

func TestServerRestartResetsClients(t *testing.T) {
	store := newCluster(20, 3)
	ts := serve(t, store, "unix", server.Options{}, server.ListenOptions{})
	var mu sync.Mutex
	var batches []client.Batch
	f := newFeed(t, ts.addr, "node-0", client.WithOnBatch(func(b client.Batch) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, b)
	}))
	waitFor(t, f, brainState(store, "node-0"))

	ts.stop() // killed mid-stream: the client's stream breaks
	churn(store, 1)
	churn(store, 2)
	ts2 := serve(t, store, ts.addr, server.Options{}, server.ListenOptions{})
	if ts2.addr != ts.addr {
		t.Fatalf("restarted on %s, not %s", ts2.addr, ts.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, ch, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Reset {
		t.Errorf("first changes from a restarted server: %v, want a reset", ch)
	}
	if want := brainState(store, "node-0"); !sameState(st, want) {
		t.Errorf("after the restart: %s", diffState(st, want))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 || batches[1].InstanceID == batches[0].InstanceID || !batches[1].Reset {
		t.Errorf("batches: %d, want 2, the second a reset from another instance", len(batches))
	}
}

func TestResumeSendsOnlyTheDiff(t *testing.T) {
	store := newCluster(20, 3)
	ts := serve(t, store, "unix", server.Options{}, server.ListenOptions{})
	first := openRaw(t, ts.addr, "node-0", 0, 0)
	ops, sync := first.batch(t)
	if ops[0].GetReset_() == nil || len(ops) != 2+1+20*4 {
		// reset, set_node, per service: set_service and 3 endpoints, sync
		t.Fatalf("first batch: %d ops starting with %v, want a reset and the whole view", len(ops), opNames(ops[:1]))
	}
	first.cancel() // disconnected

	store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(5, 3, 1)) }) // first endpoint not ready
	resumed := openRaw(t, ts.addr, "node-0", sync.InstanceId, sync.Revision)
	ops, sync2 := resumed.batch(t)
	if got, want := opNames(ops), []string{"delete_endpoint svc-5 10.1.0.5", "sync"}; !slices.Equal(got, want) {
		t.Errorf("resumed batch: %q, want %q", got, want)
	}
	if sync2.InstanceId != sync.InstanceId || sync2.Revision <= sync.Revision {
		t.Errorf("resumed sync %v after %v", sync2, sync)
	}

	// The same revision from another instance means nothing: a reset.
	other := openRaw(t, ts.addr, "node-0", sync.InstanceId+1, sync2.Revision)
	if ops, _ := other.batch(t); ops[0].GetReset_() == nil {
		t.Errorf("a foreign instance ID got %v, want a reset", opNames(ops[:1]))
	}
}

// proxy forwards loopback TCP connections to a server, and can cut them.
type proxy struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis}
	t.Cleanup(func() { lis.Close(); p.cut() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = copyConn(s, c) }()
			go func() { _, _ = copyConn(c, s) }()
		}
	}()
	return p
}

func copyConn(dst, src net.Conn) (int64, error) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestFeedResumesAfterADisconnection(t *testing.T) {
	store := newCluster(20, 3)
	ts := serve(t, store, "tcp", server.Options{}, server.ListenOptions{})
	p := newProxy(t, ts.addr[len("tcp://"):])
	var mu sync.Mutex
	var batches []client.Batch
	f := newFeed(t, "tcp://"+p.lis.Addr().String(), "node-0", client.WithOnBatch(func(b client.Batch) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, b)
	}))
	waitFor(t, f, brainState(store, "node-0"))

	p.cut()
	store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(5, 3, 1)) })
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, ch, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.ServiceKey{{Namespace: "ns", Name: "svc-5", Family: localv1.IPFamily_IPV4}}
	if ch.Reset || !slices.Equal(ch.Set, want) || len(ch.Deleted) != 0 || ch.NodeChanged {
		t.Errorf("changes after resuming: %v %v, want only %v", ch, ch.Set, want)
	}
	if w := brainState(store, "node-0"); !sameState(st, w) {
		t.Errorf("after resuming: %s", diffState(st, w))
	}
	mu.Lock()
	defer mu.Unlock()
	last := batches[len(batches)-1]
	if got := opNames(last.Ops); last.Reset || !slices.Equal(got, []string{"delete_endpoint svc-5 10.1.0.5"}) {
		t.Errorf("batch after resuming: reset=%v %q", last.Reset, got)
	}
}

func TestSlowClientGetsOneCoalescedBatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		history   int
		wantReset bool
	}{
		{"within the history", 0, false},
		{"beyond the history", 5, true}, // memory stays bounded: a full state instead
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newCluster(20, 3)
			ts := serve(t, store, "unix", server.Options{HistorySize: tc.history}, server.ListenOptions{})
			slow := openRaw(t, ts.addr, "node-0", 0, 0)
			slow.batch(t)
			// The client does not ask while 41 revisions go by.
			for gen := 1; gen <= 41; gen++ {
				store.Update(func(tx *cluster.Tx) {
					tx.SetEndpointSlice(slice(7, 3, gen))
					tx.SetService(service(100 + gen))
				})
			}
			// Another watcher of the node sees the server's view catch up.
			fast := newFeed(t, ts.addr, "node-0")
			want := brainState(store, "node-0")
			waitFor(t, fast, want)

			slow.ask(t)
			ops, _ := slow.batch(t)
			if got := ops[0].GetReset_() != nil; got != tc.wantReset {
				t.Fatalf("reset = %v, want %v", got, tc.wantReset)
			}
			if tc.wantReset {
				return
			}
			var wantOps []string
			wantOps = append(wantOps, "delete_endpoint svc-7 10.1.0.7") // gen 41: not ready; the 40 states between are skipped
			for gen := 1; gen <= 41; gen++ {
				wantOps = append(wantOps, fmt.Sprintf("set_service svc-%d", 100+gen))
			}
			slices.Sort(wantOps[1:])
			wantOps = append(wantOps, "sync")
			got := opNames(ops)
			// Entries come in key order: svc-100... sort before svc-7.
			slices.Sort(got[:len(got)-1])
			slices.Sort(wantOps[:len(wantOps)-1])
			if !slices.Equal(got, wantOps) {
				t.Errorf("coalesced batch:\n got %q\nwant %q", got, wantOps)
			}
		})
	}
}

func TestSlowHandlerIsCalledWithCoalescedChanges(t *testing.T) {
	store := newCluster(20, 3)
	ts := serve(t, store, "unix", server.Options{}, server.ListenOptions{})
	release := make(chan struct{})
	type call struct {
		changes backend.Changes
		same    bool
	}
	calls := make(chan call, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var final *backend.State
	done := make(chan error, 1)
	go func() {
		done <- client.Run(ctx, ts.addr, "node-0", func(_ context.Context, st *backend.State, ch backend.Changes) error {
			if len(calls) == 0 && st.Revision > 0 && final == nil {
				calls <- call{changes: ch}
				<-release // a slow first sync
				return nil
			}
			calls <- call{changes: ch, same: sameState(st, final)}
			return nil
		})
	}()
	first := <-calls
	if !first.changes.Reset {
		t.Errorf("first call: %v, want a reset", first.changes)
	}
	for gen := 1; gen <= 41; gen++ {
		store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(7, 3, gen)) })
	}
	final = brainState(store, "node-0")
	fast := newFeed(t, ts.addr, "node-0")
	waitFor(t, fast, final)
	close(release)
	second := <-calls
	want := []backend.ServiceKey{{Namespace: "ns", Name: "svc-7", Family: localv1.IPFamily_IPV4}}
	if !second.same || second.changes.Reset || !slices.Equal(second.changes.Set, want) {
		t.Errorf("second call: %v %v (final state: %v), want the 41 changes in one", second.changes, second.changes.Set, second.same)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 {
		t.Errorf("%d more calls, want 2 in all", len(calls))
	}
}

// A client asking for one node view more than the server keeps, all
// watched, is refused with an error it does not retry.
func TestTooManyNodeViewsIsAClearError(t *testing.T) {
	store := newCluster(5, 2)
	ts := serve(t, store, "unix", server.Options{MaxNodeViews: 2}, server.ListenOptions{})
	for _, node := range []string{"node-0", "node-1"} {
		waitFor(t, newFeed(t, ts.addr, node), brainState(store, node))
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	_, _, err := newFeed(t, ts.addr, "node-2").Next(ctx)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-node-views") || ctx.Err() != nil {
		t.Errorf("a third node view: %v, want ResourceExhausted naming --max-node-views", err)
	}
}

// A client away longer than IdleViewTimeout finds its node's view dropped:
// it gets a reset and the whole view, as the documentation says.
func TestResumeAfterTheIdleViewTimeoutIsAReset(t *testing.T) {
	store := newCluster(20, 3)
	ts := serve(t, store, "unix", server.Options{IdleViewTimeout: time.Millisecond}, server.ListenOptions{})
	first := openRaw(t, ts.addr, "node-0", 0, 0)
	_, sync := first.batch(t)
	first.cancel()
	store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(5, 3, 1)) })
	// Until the server noticed the disconnection and the timeout passed, a
	// client resuming still gets the diff (and keeps the view a little
	// longer): try until the view is gone.
	for {
		again := openRaw(t, ts.addr, "node-0", sync.InstanceId, sync.Revision)
		ops, resync := again.batch(t)
		again.cancel()
		if ops[0].GetReset_() != nil {
			want := 3 // reset, set_node, sync
			for _, se := range brainState(store, "node-0").Services {
				want += 1 + len(se.Endpoints)
			}
			if resync.InstanceId == sync.InstanceId || len(ops) != want {
				t.Errorf("after the view was dropped: %d ops, instance %d (was %d), want the whole view (%d ops) from a new instance", len(ops), resync.InstanceId, sync.InstanceId, want)
			}
			return
		}
		if got := opNames(ops); !slices.Equal(got, []string{"delete_endpoint svc-5 10.1.0.5", "sync"}) {
			t.Fatalf("resumed before the view was dropped: %q, want the diff", got)
		}
	}
}
