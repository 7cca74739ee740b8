package cluster

import (
	"context"
	"errors"
	"testing"
)

// TestRun: the sink's return ends the source; a failing source ends the
// sink and is returned; a source that returns nil (it delivered
// everything) leaves the sink running until it returns.
func TestRun(t *testing.T) {
	blockUntilDone := StageFunc(func(ctx context.Context, _ *Store) error { <-ctx.Done(); return nil })
	failed := errors.New("injected")

	sinkErr := errors.New("sink done")
	if err := Run(context.Background(), blockUntilDone, StageFunc(func(context.Context, *Store) error { return sinkErr })); err != sinkErr {
		t.Errorf("a sink that returns: Run = %v, want its error", err)
	}

	sinkEnded := false
	err := Run(context.Background(), StageFunc(func(context.Context, *Store) error { return failed }),
		StageFunc(func(ctx context.Context, _ *Store) error { <-ctx.Done(); sinkEnded = true; return nil }))
	if !errors.Is(err, failed) || !sinkEnded {
		t.Errorf("a failing source: Run = %v, sink ended %t; want the source's error and the sink ended", err, sinkEnded)
	}

	var seen uint64
	err = Run(context.Background(), StageFunc(func(_ context.Context, s *Store) error { s.MarkSynced(); return nil }),
		StageFunc(func(ctx context.Context, s *Store) error {
			rev, err := s.Wait(ctx, 0)
			seen = rev
			return err
		}))
	if err != nil || seen == 0 {
		t.Errorf("a source that delivered everything: Run = %v, the sink saw revision %d; want nil and the source's revision", err, seen)
	}
}
