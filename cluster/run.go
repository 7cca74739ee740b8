package cluster

import (
	"context"
	"fmt"
)

// Stage is a running part of a pipeline over one store: a source fills
// the store, a sink consumes it.
type Stage interface {
	Run(ctx context.Context, store *Store) error
}

// StageFunc adapts a function to Stage.
type StageFunc func(ctx context.Context, store *Store) error

// Run implements Stage.
func (f StageFunc) Run(ctx context.Context, store *Store) error { return f(ctx, store) }

// Run runs a source and a sink over a new store until the sink returns (a
// one-shot sink), either fails, or ctx ends. A source that returns nil has
// delivered everything (a file read once): the sink goes on.
func Run(ctx context.Context, source, sink Stage) error {
	store := NewStore()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcDone := make(chan error, 1)
	go func() { srcDone <- source.Run(ctx, store) }()
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- sink.Run(ctx, store) }()

	select {
	case err := <-sinkDone:
		cancel()
		<-srcDone
		return err
	case err := <-srcDone:
		if err != nil {
			cancel()
			<-sinkDone
			return fmt.Errorf("source: %w", err)
		}
		return <-sinkDone
	}
}
