//go:build e2e

package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kpng/kpng/api/localv1"
)

// Misbehaving gRPC peers of the brain, held at once.
const (
	garbageConns = 50
	slowConns    = 50
	// hugeRequest is the size of one Watch request: far above what the
	// brain accepts (gRPC's default, 4 MiB).
	hugeRequest = 16 << 20
	// memoryBound is how much the brain's resident memory may grow under
	// the abuse.
	memoryBound = 256 << 20
)

// grpcAbuse points misbehaving peers at the brain (connections sending
// garbage, a huge request, connections trickling bytes, idle connections)
// and checks that it keeps serving its agents and a new client, with
// bounded memory.
func (s *suite) grpcAbuse(t *testing.T, r *row) {
	c := s.c
	pid := c.brain.Pid()
	rss0 := rss(t, pid)
	var peak int64
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v := rssOrZero(pid); v > peak {
				peak = v
			}
			select {
			case <-sampling:
				return
			case <-time.After(50 * time.Millisecond): // sampling memory, no event to wait on
			}
		}
	}()
	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	dial := func() net.Conn {
		cn, err := net.Dial("unix", c.sock)
		if err != nil {
			t.Fatalf("connection %d to the brain: %v", len(conns)+1, err)
		}
		conns = append(conns, cn)
		return cn
	}

	// Idle connections: connected, and nothing more.
	for range s.d.idleConns {
		dial()
	}
	// Garbage: random bytes where the HTTP/2 preface should be. The
	// server must close these.
	var garbage, slow sync.WaitGroup
	closed := make(chan bool, garbageConns)
	for range garbageConns {
		cn := dial()
		garbage.Add(1)
		go func() {
			defer garbage.Done()
			junk := make([]byte, 64<<10)
			rand.Read(junk)
			cn.SetDeadline(time.Now().Add(10 * time.Second))
			cn.Write(junk)
			buf := make([]byte, 4096)
			for {
				if _, err := cn.Read(buf); err != nil {
					// EOF or reset: closed by the brain; a timeout: not.
					ne, ok := err.(net.Error)
					closed <- !(ok && ne.Timeout())
					return
				}
			}
		}()
	}
	// Slow: the HTTP/2 preface, a byte every 100 ms, for as long as the
	// test runs.
	stopSlow := make(chan struct{})
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	for range slowConns {
		cn := dial()
		slow.Add(1)
		go func() {
			defer slow.Done()
			for i := 0; ; i++ {
				select {
				case <-stopSlow:
					return
				case <-time.After(100 * time.Millisecond): // the trickle is the fault
				}
				if _, err := cn.Write(preface[i%len(preface) : i%len(preface)+1]); err != nil {
					return
				}
			}
		}()
	}
	defer func() { close(stopSlow); slow.Wait() }()

	// A huge request, from a well-formed gRPC client.
	cc, err := grpc.NewClient("unix://"+c.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(2*hugeRequest)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	huge := "no answer"
	if st, err := localv1.NewWatchClient(cc).Watch(ctx); err != nil {
		huge = "refused at open: " + status.Code(err).String()
	} else {
		_ = st.Send(&localv1.WatchRequest{NodeName: strings.Repeat("x", hugeRequest)})
		if _, err := st.Recv(); err != nil {
			huge = status.Code(err).String()
		} else {
			huge = "accepted"
			r.problems = append(r.problems, "the brain accepted a 16 MiB request")
		}
	}

	// While all that is held: the connected agents apply a change, and a
	// new client gets its node's view.
	marks := map[string]int{}
	for n, p := range c.procs {
		marks[n.Name] = p.Mark()
	}
	start := time.Now()
	s.toggleChurn(t)
	for n, p := range c.procs {
		p.WaitOutputSince(t, marks[n.Name], c.v.syncedLine(), syncTimeout)
	}
	agents := time.Since(start)
	cc2, err := grpc.NewClient("unix://"+c.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	start = time.Now()
	st, err := localv1.NewWatchClient(cc2).Watch(ctx)
	if err != nil {
		t.Fatalf("a new client's Watch: %v", err)
	}
	if err := st.Send(&localv1.WatchRequest{NodeName: "node-2"}); err != nil {
		t.Fatalf("a new client's request: %v", err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("a new client got no view: %v", err)
	}
	fresh := time.Since(start)
	s.toggleChurn(t)

	garbage.Wait()
	close(closed)
	nClosed := 0
	for ok := range closed {
		if ok {
			nClosed++
		}
	}
	close(sampling)
	<-sampled
	growth := peak - rss0
	r.measured = fmt.Sprintf("%d idle + %d slow + %d garbage conns (%d closed by the brain), a %d MiB request (%s); agents applied a change in %v, a new client got its view in %v; brain RSS %d MiB, peak +%d MiB",
		s.d.idleConns, slowConns, garbageConns, nClosed, hugeRequest>>20, huge, agents.Round(time.Millisecond), fresh.Round(time.Millisecond), rss0>>20, growth>>20)
	if growth > memoryBound {
		r.problems = append(r.problems, fmt.Sprintf("the brain's memory grew by %d MiB (> %d MiB)", growth>>20, memoryBound>>20))
	}
	if nClosed < garbageConns {
		r.problems = append(r.problems, fmt.Sprintf("%d of %d garbage connections left open", garbageConns-nClosed, garbageConns))
	}
}

// rss returns the resident memory of process pid, in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	v := rssOrZero(pid)
	if v == 0 {
		t.Fatalf("no VmRSS for pid %d", pid)
	}
	return v
}

func rssOrZero(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
