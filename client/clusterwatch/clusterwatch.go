// Package clusterwatch is the client of kpng's globalv1 Watch API: the
// cluster state a brain serves to node agents (`kpng api --api ...`),
// which run the brain for their own node on it.
//
// It is apart from package client, whose users (backends fed a node's view
// over localv1) need neither the cluster model nor its types.
package clusterwatch

import (
	"context"

	"google.golang.org/grpc"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/client/internal/session"
)

// Batch is one batch of the globalv1 stream: a consistent change of the
// cluster state, to apply as a whole. With Reset, Ops are the whole state:
// forget what is not in them. Ops come without the Reset and the Sync,
// whose InstanceID and Revision the batch carries.
type Batch = session.Batch[*globalv1.Op]

// request asks for the batch after the position (instance, revision).
func request(instance, revision uint64) *globalv1.WatchRequest {
	return &globalv1.WatchRequest{InstanceId: instance, Revision: revision}
}

// Watch streams the cluster state from the server on conn (see
// client.Dial) into apply, one batch at a time: the next batch is asked for
// only when apply returned, so it holds everything that changed meanwhile.
// It reconnects and resumes by itself (opts set the backoff and the
// logger), and returns when ctx ends (nil), the server refuses the watch, a
// limit is exceeded (a message over the receive limit: ResourceExhausted),
// the server breaks the protocol, or apply fails.
func Watch(ctx context.Context, conn *grpc.ClientConn, apply func(Batch) error, opts ...client.Option) error {
	wc := globalv1.NewWatchClient(conn)
	s := &session.Session[*globalv1.Op]{O: session.Build(opts), Name: "globalv1", Proto: session.Protocol[*globalv1.Op]{
		Open: func(ctx context.Context, instance, revision uint64) (*session.Stream[*globalv1.Op], error) {
			return session.OpenStream(ctx, wc.Watch, request(instance, revision), request, (*globalv1.Ops).GetOps)
		},
		Sync: func(op *globalv1.Op) (uint64, uint64, bool) {
			s := op.GetSync()
			return s.GetInstanceId(), s.GetRevision(), s != nil
		},
		IsReset: func(op *globalv1.Op) bool { return op.GetReset_() != nil },
	}}
	defer s.Close()
	for {
		b, err := s.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := apply(b); err != nil {
			return err
		}
		s.Applied(b.InstanceID, b.Revision)
	}
}
