package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// batch is one consistent batch of a Watch stream: its operations (without
// the final Sync) and the Sync's position.
type batch[O any] struct {
	reset    bool
	ops      []O
	instance uint64
	revision uint64
}

// position is where a client is in a server's history: the Sync of the
// last batch it applied (0, 0: none).
type position struct{ instance, revision uint64 }

// stream is one Watch stream, whatever the API.
type stream[O any] struct {
	// at is the position the stream moved to: the Sync of the last batch it
	// delivered, or the position it was opened from. A stream only moves
	// forward from there.
	at position
	// ask sends a request for the next batch.
	ask func(instance, revision uint64) error
	// recv receives the next message's operations.
	recv   func() ([]O, error)
	cancel context.CancelFunc
}

// protocol is what a session needs to know of an API.
type protocol[O any] struct {
	// open starts a stream and sends its first request.
	open func(ctx context.Context, instance, revision uint64) (*stream[O], error)
	// sync returns the position of a Sync operation.
	sync func(op O) (instance, revision uint64, ok bool)
	// isReset reports whether an operation is a Reset.
	isReset func(op O) bool
}

// session is the client side of a Watch protocol across reconnections: it
// asks for a batch only when the caller wants one (client-paced delivery),
// and resumes from the last batch the caller applied.
type session[O any] struct {
	proto    protocol[O]
	o        options
	name     string // for logs
	cur      *stream[O]
	last     position // the Sync of the last batch the caller applied
	failures int
}

// applied records the Sync of the last batch the caller applied: the next
// batch follows it. The caller calls it after applying a batch, so that a
// batch it could not apply is not skipped: the stream, which moved past it,
// is then re-opened from the position the caller holds.
func (s *session[O]) applied(instance, revision uint64) {
	s.last = position{instance, revision}
}

// errProtocol marks a stream that breaks the protocol: not retried.
var errProtocol = errors.New("protocol error")

// next returns the next batch, reconnecting (with backoff) as long as it
// takes. It fails only when ctx ends, the server refuses the request, a
// limit is exceeded (ResourceExhausted), or the server breaks the protocol:
// no retry would change these.
func (s *session[O]) next(ctx context.Context) (batch[O], error) {
	log := s.o.logger.With("api", s.name)
	for {
		b, err := s.try(ctx)
		if err == nil {
			if s.failures > 0 {
				log.Info("Watch resumed", "reset", b.reset, "revision", b.revision)
			}
			s.failures = 0
			s.cur.at = position{b.instance, b.revision}
			return b, nil
		}
		if s.cur != nil {
			s.cur.cancel()
			s.cur = nil
		}
		if ctx.Err() != nil {
			return batch[O]{}, ctx.Err()
		}
		if errors.Is(err, errProtocol) {
			return batch[O]{}, err // the server would send the same again
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
			return batch[O]{}, fmt.Errorf("watch refused: %w", err)
		case codes.ResourceExhausted:
			// A message over this client's receive limit, or a server at its
			// bound of node views: trying again would fetch the same.
			return batch[O]{}, fmt.Errorf("watch failed, not retried: %w", err)
		}
		wait := min(s.o.minBackoff<<min(s.failures, 16), s.o.maxBackoff)
		s.failures++
		log.Error("Watch failed, reconnecting", "err", err, "in", wait, "failures", s.failures)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return batch[O]{}, ctx.Err()
		case <-t.C:
		}
	}
}

func (s *session[O]) try(ctx context.Context) (batch[O], error) {
	if s.cur != nil && s.cur.at != s.last {
		s.close()
	}
	if s.cur == nil {
		st, err := s.proto.open(ctx, s.last.instance, s.last.revision)
		if err != nil {
			return batch[O]{}, err
		}
		st.at = s.last
		s.cur = st
	} else if err := s.cur.ask(s.last.instance, s.last.revision); err != nil {
		return batch[O]{}, err
	}
	var b batch[O]
	for {
		ops, err := s.cur.recv()
		if err != nil {
			return batch[O]{}, err
		}
		for i, op := range ops {
			if inst, rev, ok := s.proto.sync(op); ok {
				if i != len(ops)-1 {
					return batch[O]{}, fmt.Errorf("%w: operations after Sync in one message", errProtocol)
				}
				b.instance, b.revision = inst, rev
				return b, nil
			}
			if s.proto.isReset(op) {
				if len(b.ops) != 0 {
					return batch[O]{}, fmt.Errorf("%w: Reset in the middle of a batch", errProtocol)
				}
				b.reset = true
				continue
			}
			b.ops = append(b.ops, op)
		}
	}
}

// close ends the current stream.
func (s *session[O]) close() {
	if s.cur != nil {
		s.cur.cancel()
		s.cur = nil
	}
}
