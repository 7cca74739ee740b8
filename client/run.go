// Package client is the Go client library of kpng's gRPC API: it lets a
// service proxy live in its own process (or its own repository) and still be
// fed by kpng's brain, with exactly the backend contract of package backend.
//
// Two styles, as KEP-2104 describes:
//
//   - full state: Run calls a handler with the node's complete view and
//     what changed since the previous call (package diffstore helps turn
//     the view into dataplane changes);
//   - incremental: RunIncremental drives a backend.Incremental with
//     SetService, DeleteService, SetEndpoint, DeleteEndpoint, then Sync.
//
// A minimal backend:
//
//	err := client.Run(ctx, "unix:///run/kpng/kpng.sock", "node-1",
//		func(ctx context.Context, st *backend.State, ch backend.Changes) error {
//			for _, k := range ch.Set {
//				fmt.Println("set", k, st.Services[k])
//			}
//			return nil
//		})
//
// Feed is the lower level: a backend.Feed that backend.Run drives, which is
// how `kpng local --api ... to-<backend>` runs the very same backends as the
// in-process `to-local`.
package client

import (
	"context"

	"github.com/kpng/kpng/backend"
)

// Handler is a backend in the full-state style; see backend.Backend.Sync.
type Handler func(ctx context.Context, state *backend.State, changes backend.Changes) error

// Run feeds handler with nodeName's view from the server at target until
// ctx ends (returning nil), the server refuses the watch, a limit is
// exceeded (ResourceExhausted: a message over the receive limit, or a
// server at its bound of node views), or the server breaks the protocol:
// no retry would change these.
// Connection failures are retried forever; a failing handler is retried
// with backoff and Changes.Reset, as backend.Run does.
func Run(ctx context.Context, target, nodeName string, handler Handler, opts ...Option) error {
	return RunBackend(ctx, target, nodeName, backend.Func(handler), opts...)
}

// RunIncremental drives an incremental-style backend with nodeName's view
// from the server at target, like Run.
func RunIncremental(ctx context.Context, target, nodeName string, inc backend.Incremental, opts ...Option) error {
	return RunBackend(ctx, target, nodeName, backend.FromIncremental(inc), opts...)
}

// RunBackend drives any backend.Backend, like Run.
func RunBackend(ctx context.Context, target, nodeName string, b backend.Backend, opts ...Option) error {
	feed, err := NewFeed(target, nodeName, opts...)
	if err != nil {
		return err
	}
	defer feed.Close()
	return backend.Run(ctx, feed, b, feed.o.Run)
}
