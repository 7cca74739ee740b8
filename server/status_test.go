package server

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/cluster"
)

// fakeStream is the server side of a Watch stream: it gives the handler
// the requests, and ends the stream's context (as a client going away
// does) once the first batch is sent.
type fakeStream[Req, Resp any] struct {
	grpc.ServerStream
	ctx      context.Context
	cancel   context.CancelFunc
	requests []*Req
	isSync   func(*Resp) bool
}

func (f *fakeStream[Req, Resp]) Context() context.Context { return f.ctx }

func (f *fakeStream[Req, Resp]) Send(m *Resp) error {
	if f.isSync(m) {
		f.cancel()
	}
	return nil
}

func (f *fakeStream[Req, Resp]) Recv() (*Req, error) {
	if len(f.requests) == 0 {
		<-f.ctx.Done()
		return nil, status.FromContextError(f.ctx.Err()).Err()
	}
	r := f.requests[0]
	f.requests = f.requests[1:]
	return r, nil
}

// Both Watch services end a stream whose context ended with a gRPC status
// (Canceled), not a bare context error that gRPC would report as Unknown.
func TestWatchEndsWithAStatus(t *testing.T) {
	store := cluster.NewStore()
	store.MarkSynced()
	s := New(store, Options{})
	life, stop := context.WithCancel(context.Background())
	defer stop()
	s.ctx = life

	for name, watch := range map[string]func(ctx context.Context, cancel context.CancelFunc) error{
		"localv1": func(ctx context.Context, cancel context.CancelFunc) error {
			return localService{s: s}.Watch(&fakeStream[localv1.WatchRequest, localv1.Ops]{ctx: ctx, cancel: cancel,
				requests: []*localv1.WatchRequest{{NodeName: "node-0"}, {}},
				isSync:   func(m *localv1.Ops) bool { return m.Ops[len(m.Ops)-1].GetSync() != nil }})
		},
		"globalv1": func(ctx context.Context, cancel context.CancelFunc) error {
			return globalService{s: s}.Watch(&fakeStream[globalv1.WatchRequest, globalv1.Ops]{ctx: ctx, cancel: cancel,
				requests: []*globalv1.WatchRequest{{}, {}},
				isSync:   func(m *globalv1.Ops) bool { return m.Ops[len(m.Ops)-1].GetSync() != nil }})
		},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		err := watch(ctx, cancel)
		cancel()
		if st, ok := status.FromError(err); !ok || st.Code() != codes.Canceled {
			t.Errorf("%s: the stream ended with %#v, want a gRPC status Canceled", name, err)
		}
	}
}
