package client

import (
	"context"

	"google.golang.org/grpc"

	"github.com/kpng/kpng/api/globalv1"
)

// ClusterBatch is one batch of the globalv1 stream: a consistent change of
// the cluster state, to apply as a whole.
type ClusterBatch struct {
	// Reset: Ops are the whole state; forget what is not in them.
	Reset bool
	// Ops are the operations, without the Reset and the Sync.
	Ops        []*globalv1.Op
	InstanceID uint64
	Revision   uint64
}

// WatchCluster streams the cluster state from the server on conn (see Dial)
// into apply, one batch at a time: the next batch is asked for only when
// apply returned, so it holds everything that changed meanwhile. It
// reconnects and resumes by itself, and returns when ctx ends (nil), the
// server refuses the watch, a limit is exceeded (a message over the receive
// limit: ResourceExhausted), the server breaks the protocol, or apply
// fails.
func WatchCluster(ctx context.Context, conn *grpc.ClientConn, apply func(ClusterBatch) error, opts ...Option) error {
	o := buildOptions(opts)
	client := globalv1.NewWatchClient(conn)
	s := &session[*globalv1.Op]{o: o, name: "globalv1", proto: protocol[*globalv1.Op]{
		open: func(ctx context.Context, instance, revision uint64) (*stream[*globalv1.Op], error) {
			sctx, cancel := context.WithCancel(ctx)
			st, err := client.Watch(sctx)
			if err == nil {
				err = st.Send(&globalv1.WatchRequest{InstanceId: instance, Revision: revision})
			}
			if err != nil {
				cancel()
				return nil, err
			}
			return &stream[*globalv1.Op]{
				ask: func(instance, revision uint64) error {
					return st.Send(&globalv1.WatchRequest{InstanceId: instance, Revision: revision})
				},
				recv: func() ([]*globalv1.Op, error) {
					m, err := st.Recv()
					return m.GetOps(), err
				},
				cancel: cancel,
			}, nil
		},
		sync: func(op *globalv1.Op) (uint64, uint64, bool) {
			s := op.GetSync()
			return s.GetInstanceId(), s.GetRevision(), s != nil
		},
		isReset: func(op *globalv1.Op) bool { return op.GetReset_() != nil },
	}}
	defer s.close()
	for {
		b, err := s.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := apply(ClusterBatch{Reset: b.reset, Ops: b.ops, InstanceID: b.instance, Revision: b.revision}); err != nil {
			return err
		}
		s.applied(b.instance, b.revision)
	}
}
