package client

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// scriptedServer is a localv1 server whose answers a test writes: it calls
// answer with each request (numbered per stream, from 0) and sends what it
// returns as one message, and it records every request.
type scriptedServer struct {
	localv1.UnimplementedWatchServer
	answer func(stream, n int, req *localv1.WatchRequest) []*localv1.Op

	mu       sync.Mutex
	streams  int
	requests []string
}

func (s *scriptedServer) Watch(st localv1.Watch_WatchServer) error {
	s.mu.Lock()
	id := s.streams
	s.streams++
	s.mu.Unlock()
	for n := 0; ; n++ {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		s.mu.Lock()
		s.requests = append(s.requests, fmt.Sprintf("stream %d request %d from (%d, %d)", id, n, req.InstanceId, req.Revision))
		s.mu.Unlock()
		if err := st.Send(&localv1.Ops{Ops: s.answer(id, n, req)}); err != nil {
			return nil
		}
	}
}

func (s *scriptedServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// serveScripted serves s on a unix socket until the test ends.
func serveScripted(t *testing.T, s *scriptedServer) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kpng.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	localv1.RegisterWatchServer(g, s)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return "unix://" + path
}

func syncOp(instance, revision uint64) *localv1.Op {
	return &localv1.Op{Op: &localv1.Op_Sync{Sync: &localv1.Sync{InstanceId: instance, Revision: revision}}}
}

// A batch the feed cannot apply is not skipped: the state stays at the
// last batch applied, and the next call resumes from there, on a new stream
// (the old one moved past the batch), instead of asking for what follows the
// batch it dropped.
func TestFeedResumesFromTheLastAppliedBatch(t *testing.T) {
	srv := &scriptedServer{answer: func(stream, n int, req *localv1.WatchRequest) []*localv1.Op {
		switch {
		case stream == 0 && n == 0:
			return []*localv1.Op{{Op: &localv1.Op_Reset_{Reset_: &localv1.Reset{}}}, svcOp("a"), syncOp(7, 1)}
		case stream == 0 && n == 1: // endpoints of a service never set
			return []*localv1.Op{svcOp("b"), epOp(true, "x", "10.0.0.1", true), syncOp(7, 2)}
		case req.InstanceId == 7 && req.Revision == 1:
			return []*localv1.Op{svcOp("b"), syncOp(7, 2)}
		default:
			return []*localv1.Op{svcOp("wrong"), syncOp(7, 3)}
		}
	}}
	f, err := NewFeed(serveScripted(t, srv), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	st, _, err := f.Next(ctx)
	if err != nil || st.Revision != 1 || len(st.Services) != 1 {
		t.Fatalf("first batch: %v, %v", st, err)
	}
	if _, _, err := f.Next(ctx); err == nil {
		t.Fatal("a batch with endpoints of an unknown service was applied")
	}
	if st.Revision != 1 || len(st.Services) != 1 || st.Services[key("a")] == nil {
		t.Fatalf("after a failed batch, the state holds %v at revision %d", st.Services, st.Revision)
	}
	st, ch, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != 2 || !slices.Equal(ch.Set, []backend.ServiceKey{key("b")}) || len(st.Services) != 2 {
		t.Errorf("after resuming: revision %d, set %v, services %v", st.Revision, ch.Set, st.Services)
	}
	want := []string{"stream 0 request 0 from (0, 0)", "stream 0 request 1 from (7, 1)", "stream 1 request 0 from (7, 1)"}
	if got := srv.seen(); !slices.Equal(got, want) {
		t.Errorf("requests:\n%q\nwant\n%q", got, want)
	}
}

// A message over the client's receive limit would come again with every
// attempt: the feed fails, naming the limit, instead of fetching the same
// batch again forever.
func TestFeedFailsOnAMessageOverItsLimit(t *testing.T) {
	big := &localv1.Service{Namespace: "ns", Name: "big", Family: localv1.IPFamily_IPV4, ClusterIp: "10.96.0.1"}
	for i := range 200 {
		big.ExternalIps = append(big.ExternalIps, fmt.Sprintf("172.16.0.%d", i))
	}
	srv := &scriptedServer{answer: func(int, int, *localv1.WatchRequest) []*localv1.Op {
		return []*localv1.Op{{Op: &localv1.Op_SetService{SetService: big}}, syncOp(7, 1)}
	}}
	f, err := NewFeed(serveScripted(t, srv), "node-1", WithBackoff(time.Millisecond, 10*time.Millisecond),
		WithDialOptions(grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<10))))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = f.Next(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("got %v, want an error naming the receive limit", err)
	}
	if got := srv.seen(); len(got) != 1 {
		t.Errorf("the client asked %d times: %q", len(got), got)
	}
}

// A stream that breaks the protocol's framing would break it again: the
// feed fails, naming the fault, instead of reconnecting forever.
func TestFeedFailsOnAFramingError(t *testing.T) {
	for name, ops := range map[string][]*localv1.Op{
		"operations after sync":    {svcOp("a"), syncOp(7, 1), svcOp("b")},
		"reset after an operation": {svcOp("a"), {Op: &localv1.Op_Reset_{Reset_: &localv1.Reset{}}}, syncOp(7, 1)},
	} {
		t.Run(name, func(t *testing.T) {
			srv := &scriptedServer{answer: func(int, int, *localv1.WatchRequest) []*localv1.Op { return ops }}
			f, err := NewFeed(serveScripted(t, srv), "node-1", WithBackoff(time.Millisecond, 10*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err = f.Next(ctx)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "protocol error") {
				t.Fatalf("got %v, want a protocol error", err)
			}
			if got := srv.seen(); len(got) != 1 {
				t.Errorf("the client asked %d times: %q", len(got), got)
			}
		})
	}
}
