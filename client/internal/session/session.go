// Package session is the client side of kpng's Watch protocols (localv1 and
// globalv1), whatever the API: client-paced batches, resumption after a
// reconnection, backoff; and the options and connection that package client
// and package client/clusterwatch share.
package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Batch is one consistent batch of a Watch stream: its operations (without
// the Reset and the final Sync) and the Sync's position.
type Batch[O any] struct {
	// Reset: Ops are the whole state; forget what is not in them.
	Reset bool
	// Ops are the operations, without the Reset and the Sync.
	Ops []O
	// InstanceID and Revision are the batch's Sync.
	InstanceID uint64
	Revision   uint64
}

// position is where a client is in a server's history: the Sync of the
// last batch it applied (0, 0: none).
type position struct{ instance, revision uint64 }

// Stream is one Watch stream, whatever the API.
type Stream[O any] struct {
	// at is the position the stream moved to: the Sync of the last batch it
	// delivered, or the position it was opened from. A stream only moves
	// forward from there.
	at position
	// Ask sends a request for the next batch.
	Ask func(instance, revision uint64) error
	// Recv receives the next message's operations.
	Recv   func() ([]O, error)
	Cancel context.CancelFunc
}

// Protocol is what a session needs to know of an API.
type Protocol[O any] struct {
	// Open starts a stream and sends its first request.
	Open func(ctx context.Context, instance, revision uint64) (*Stream[O], error)
	// Sync returns the position of a Sync operation.
	Sync func(op O) (instance, revision uint64, ok bool)
	// IsReset reports whether an operation is a Reset.
	IsReset func(op O) bool
}

// Session is the client side of a Watch protocol across reconnections: it
// asks for a batch only when the caller wants one (client-paced delivery),
// and resumes from the last batch the caller applied.
type Session[O any] struct {
	Proto    Protocol[O]
	O        Options
	Name     string // for logs
	cur      *Stream[O]
	last     position // the Sync of the last batch the caller applied
	failures int
}

// Applied records the Sync of the last batch the caller applied: the next
// batch follows it. The caller calls it after applying a batch, so that a
// batch it could not apply is not skipped: the stream, which moved past it,
// is then re-opened from the position the caller holds.
func (s *Session[O]) Applied(instance, revision uint64) {
	s.last = position{instance, revision}
}

// ErrProtocol marks a stream that breaks the protocol: not retried.
var ErrProtocol = errors.New("protocol error")

// Next returns the next batch, reconnecting (with backoff) as long as it
// takes. It fails only when ctx ends, the server refuses the request, a
// limit is exceeded (ResourceExhausted), or the server breaks the protocol:
// no retry would change these.
func (s *Session[O]) Next(ctx context.Context) (Batch[O], error) {
	log := s.O.Logger.With("api", s.Name)
	for {
		b, err := s.try(ctx)
		if err == nil {
			if s.failures > 0 {
				log.Info("Watch resumed", "reset", b.Reset, "revision", b.Revision)
			}
			s.failures = 0
			s.cur.at = position{b.InstanceID, b.Revision}
			return b, nil
		}
		if s.cur != nil {
			s.cur.Cancel()
			s.cur = nil
		}
		if ctx.Err() != nil {
			return Batch[O]{}, ctx.Err()
		}
		if errors.Is(err, ErrProtocol) {
			return Batch[O]{}, err // the server would send the same again
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
			return Batch[O]{}, fmt.Errorf("watch refused: %w", err)
		case codes.ResourceExhausted:
			// A message over this client's receive limit, or a server at its
			// bound of node views: trying again would fetch the same.
			return Batch[O]{}, fmt.Errorf("watch failed, not retried: %w", err)
		}
		wait := min(s.O.MinBackoff<<min(s.failures, 16), s.O.MaxBackoff)
		s.failures++
		log.Error("Watch failed, reconnecting", "err", err, "in", wait, "failures", s.failures)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Batch[O]{}, ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Session[O]) try(ctx context.Context) (Batch[O], error) {
	if s.cur != nil && s.cur.at != s.last {
		s.Close()
	}
	if s.cur == nil {
		st, err := s.Proto.Open(ctx, s.last.instance, s.last.revision)
		if err != nil {
			return Batch[O]{}, err
		}
		st.at = s.last
		s.cur = st
	} else if err := s.cur.Ask(s.last.instance, s.last.revision); err != nil {
		return Batch[O]{}, err
	}
	var b Batch[O]
	for {
		ops, err := s.cur.Recv()
		if err != nil {
			return Batch[O]{}, err
		}
		for i, op := range ops {
			if inst, rev, ok := s.Proto.Sync(op); ok {
				if i != len(ops)-1 {
					return Batch[O]{}, fmt.Errorf("%w: operations after Sync in one message", ErrProtocol)
				}
				b.InstanceID, b.Revision = inst, rev
				return b, nil
			}
			if s.Proto.IsReset(op) {
				if len(b.Ops) != 0 {
					return Batch[O]{}, fmt.Errorf("%w: Reset in the middle of a batch", ErrProtocol)
				}
				b.Reset = true
				continue
			}
			b.Ops = append(b.Ops, op)
		}
	}
}

// Close ends the current stream.
func (s *Session[O]) Close() {
	if s.cur != nil {
		s.cur.Cancel()
		s.cur = nil
	}
}

// OpenStream opens a Stream over the bidirectional Watch call that watch
// starts: first is the request that opens it, ask makes the request of
// each next batch, and ops reads a message's operations.
func OpenStream[Req, Msg any, O any](ctx context.Context,
	watch func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Msg], error),
	first *Req, ask func(instance, revision uint64) *Req, ops func(*Msg) []O) (*Stream[O], error) {
	sctx, cancel := context.WithCancel(ctx)
	st, err := watch(sctx)
	if err == nil {
		err = st.Send(first)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &Stream[O]{
		Ask: func(instance, revision uint64) error { return st.Send(ask(instance, revision)) },
		Recv: func() ([]O, error) {
			m, err := st.Recv()
			return ops(m), err
		},
		Cancel: cancel,
	}, nil
}
