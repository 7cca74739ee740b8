package server_test

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// stallProxy forwards loopback TCP connections to a unix socket. On each of
// its first `stalled` connections it forwards only `budget` bytes from the
// server, then stops forwarding (the client is left with part of what the
// server sent) and reports it on reached. cut closes every connection.
type stallProxy struct {
	lis     net.Listener
	target  string
	budget  int
	stalled int
	reached chan struct{}

	mu    sync.Mutex
	n     int
	conns []net.Conn
}

func newStallProxy(t *testing.T, socket string, budget, stalled int) *stallProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{lis: lis, target: socket, budget: budget, stalled: stalled, reached: make(chan struct{}, stalled)}
	t.Cleanup(func() { lis.Close(); p.cut() })
	go p.accept()
	return p
}

func (p *stallProxy) addr() string { return "tcp://" + p.lis.Addr().String() }

func (p *stallProxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("unix", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		stall := p.n < p.stalled
		p.n++
		p.mu.Unlock()
		go func() { _, _ = copyConn(s, c) }()
		if !stall {
			go func() { _, _ = copyConn(c, s) }()
			continue
		}
		go func() {
			// Forward the budget, then hold the connection open: the
			// client waits for the rest of a batch that never comes.
			if _, err := io.CopyN(c, s, int64(p.budget)); err == nil {
				p.reached <- struct{}{}
			}
		}()
	}
}

func (p *stallProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// syncLog records the changes of every sync of a backend.
type syncLog struct {
	mu    sync.Mutex
	syncs []backend.Changes
}

func (l *syncLog) option() client.Option {
	return client.WithRunOptions(backend.Options{OnSync: func(r backend.SyncResult) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.syncs = append(l.syncs, r.Changes)
	}})
}

func (l *syncLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.syncs)
}

func (l *syncLog) at(i int) backend.Changes {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncs[i]
}

// converge waits until b holds exactly the brain's view of node.
func converge(t *testing.T, b *fullState, store *cluster.Store, node, step string) {
	t.Helper()
	want := brainState(store, node)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	for !sameState(b.state(), want) {
		select {
		case <-b.synced:
		case <-ctx.Done():
			t.Fatalf("%s: %s never converged: %s", step, node, diffState(b.state(), want))
		}
	}
}

// TestServerKilledMidBatch: brain + N clients (three node backends over
// localv1, one cluster copy over globalv1). The server is killed while
// each client holds part of its first batch, the cluster changes, and a
// new server (a new instance) starts on the same socket: nothing partial
// was ever applied, and every client resets and converges. Then the server
// is killed again while the cluster keeps changing, and they converge
// again, each with a reset.
func TestServerKilledMidBatch(t *testing.T) {
	store := newCluster(300, 3)
	// Ten operations per message: a first batch is ~100 messages, and the
	// budget lets through a few whole ones, never the Sync.
	opts := server.Options{ChunkSize: 10}
	ts := serve(t, store, "unix", opts, server.ListenOptions{})
	socket := strings.TrimPrefix(ts.addr, "unix://")
	const budget = 8 << 10
	p := newStallProxy(t, socket, budget, 4)

	nodes := []string{"node-0", "node-1", "node-2"}
	backends := make([]*fullState, len(nodes))
	logs := make([]*syncLog, len(nodes))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i, node := range nodes {
		backends[i], logs[i] = &fullState{synced: make(chan struct{}, 1)}, &syncLog{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := client.RunBackend(ctx, p.addr(), node, backends[i],
				client.WithInsecure(), client.WithBackoff(10e6, 100e6), logs[i].option())
			if err != nil {
				t.Errorf("%s: %v", node, err)
			}
		}()
	}
	copy := runRemote(t, p.addr())
	timeout, stop := context.WithTimeout(ctx, guard)
	defer stop()
	for i := range 4 {
		select {
		case <-p.reached:
		case <-timeout.Done():
			t.Fatalf("only %d of 4 clients received %d bytes", i, budget)
		}
	}

	// Killed mid-batch: no client may have applied any of it.
	ts.stop()
	p.cut()
	for i, l := range logs {
		if n := l.count(); n != 0 {
			t.Errorf("%s: %d syncs from a partial batch", nodes[i], n)
		}
	}
	if n := len(dump(copy)); n != 0 {
		t.Errorf("the cluster copy holds %d objects from a partial batch", n)
	}
	for round := range 3 {
		churn(store, round)
	}
	ts2 := serve(t, store, ts.addr, opts, server.ListenOptions{})
	for i, node := range nodes {
		converge(t, backends[i], store, node, "after the first restart")
		if ch := logs[i].at(0); !ch.Reset {
			t.Errorf("%s: first sync %v, want a reset", node, ch)
		}
	}
	waitStore(t, copy, store)

	// Killed between batches while the cluster changes.
	before := make([]int, len(logs))
	for i, l := range logs {
		before[i] = l.count()
	}
	churning := make(chan struct{})
	go func() {
		defer close(churning)
		for round := 3; round < 40; round++ {
			churn(store, round)
		}
	}()
	ts2.stop()
	serve(t, store, ts.addr, opts, server.ListenOptions{})
	<-churning
	for i, node := range nodes {
		converge(t, backends[i], store, node, "after the second restart")
		reset := false
		for j := before[i]; j < logs[i].count(); j++ {
			reset = reset || logs[i].at(j).Reset
		}
		if !reset {
			t.Errorf("%s: no reset after the second restart", node)
		}
	}
	waitStore(t, copy, store)
}

// countingListener counts the bytes the server writes on each connection,
// in the order they were accepted.
type countingListener struct {
	net.Listener
	mu      sync.Mutex
	written []*atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := &atomic.Int64{}
	l.mu.Lock()
	l.written = append(l.written, n)
	l.mu.Unlock()
	return &countingConn{Conn: c, written: n}, nil
}

func (l *countingListener) conn(i int) *atomic.Int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written[i]
}

type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	// Counted before writing: the client may read and the test look before
	// Write returns.
	c.written.Add(int64(len(b)))
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n - len(b)))
	return n, err
}

// http2Noise bounds the control frames (pings, window updates) that HTTP/2
// may send on a connection on its own: a few frames.
const http2Noise = 64

// TestSlowClientIsSentNothingUntilItAsks measures, on the wire, what a
// client that does not ask for its next batch costs the server: nothing is
// sent (nor buffered) while revisions go by, and the batch it finally gets
// is the same size after 300 revisions as after 11.
func TestSlowClientIsSentNothingUntilItAsks(t *testing.T) {
	store := newCluster(20, 3)
	lis, gopts, err := server.Listen("unix://"+t.TempDir()+"/kpng.sock", server.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingListener{Listener: lis}
	ts := serveOn(t, store, counting, gopts, server.Options{})
	slow := openRaw(t, ts.addr, "node-0", 0, 0)
	slow.batch(t)
	fast := newFeed(t, ts.addr, "node-0") // sees the server's view catch up
	waitFor(t, fast, brainState(store, "node-0"))
	wire := counting.conn(0)
	sent := wire.Load()

	gen := 0
	// revisions makes n revisions of svc-7's first endpoint's readiness
	// (n odd: it goes from ready to not ready), checks that the slow client
	// was sent nothing meanwhile, and returns the bytes of the batch it gets
	// when it then asks.
	revisions := func(n int) int64 {
		t.Helper()
		for range n {
			gen++
			store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(7, 3, gen)) })
		}
		waitFor(t, fast, brainState(store, "node-0"))
		before := wire.Load()
		// HTTP/2 may ping (17 bytes a frame); a batch per revision would
		// be kilobytes.
		if before-sent > http2Noise {
			t.Errorf("%d bytes sent to a client that did not ask, over %d revisions", before-sent, n)
		}
		slow.ask(t)
		ops, _ := slow.batch(t)
		if got, want := opNames(ops), []string{"delete_endpoint svc-7 10.1.0.7", "sync"}; !slices.Equal(got, want) {
			t.Errorf("after %d revisions: %q, want one coalesced change %q", n, got, want)
		}
		sent = wire.Load()
		return sent - before
	}
	few := revisions(11)
	// Ready again, and caught up.
	gen++
	store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(7, 3, gen)) })
	waitFor(t, fast, brainState(store, "node-0"))
	slow.ask(t)
	slow.batch(t)
	sent = wire.Load()
	many := revisions(301)
	// The Sync's revision is a few bytes longer, and a ping may fall in
	// either; the rest is identical.
	if few == 0 || many > few+http2Noise {
		t.Errorf("the coalesced batch is %d bytes after 11 revisions and %d after 301, want about the same", few, many)
	}
	t.Logf("coalesced batch on the wire: %d bytes after 11 revisions, %d after 301", few, many)
}
