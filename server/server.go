// Package server serves a cluster store over gRPC: the localv1 Watch
// service (one node's resolved view, computed here by the brain) and the
// globalv1 Watch service (the cluster state itself, for node agents that run
// the brain themselves).
//
// Both speak the same protocol. A stream opens with a request carrying the
// client's last (instance ID, revision); the server answers with one batch of
// operations ending with Sync, and sends the next batch only when the client
// asks for it. Each batch holds everything that changed since the previous
// one, computed from a journal (the current state plus a bounded history of
// the values each changed key had): the server keeps no per-client state but
// a revision, a slow client gets fewer, larger batches, and memory does not
// grow with how far behind a client is. A client whose revision the history
// no longer reaches, or whose instance ID is not this server's, gets a Reset
// and the whole state.
package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
)

// Options tune a Server. The zero value is usable.
type Options struct {
	// HistorySize bounds each journal's history, in changed keys: a client
	// further behind gets the whole state. Zero means DefaultHistorySize.
	HistorySize int
	// IdleViewTimeout is how long a node's view is kept after its last
	// watcher left, so that a reconnecting client gets only the diff. Zero
	// means five minutes.
	IdleViewTimeout time.Duration
	// MaxNodeViews bounds the node views (localv1) the server keeps, one
	// per node name (and service proxy name) asked for: each holds the
	// node's whole view, about 2.3 MiB per 1,000 Services. At the bound, a
	// new node takes the place of the view unwatched for longest (whose
	// client then gets a reset if it comes back); when every view is
	// watched, the client is refused with ResourceExhausted. Zero means
	// DefaultMaxNodeViews.
	MaxNodeViews int
	// ChunkSize bounds the number of operations per message. Zero means
	// 1,000.
	ChunkSize int
	// ChunkBytes bounds the encoded size of a message of several
	// operations (an operation larger than that goes alone). It must stay
	// well under what clients accept: 4 MiB for a gRPC client with default
	// settings, in any language; 64 MiB for client.Dial. Zero means
	// DefaultChunkBytes.
	ChunkBytes int
}

// DefaultHistorySize is the default bound of a journal's history.
const DefaultHistorySize = 1 << 14

// DefaultMaxNodeViews is the default bound of the node views a server
// keeps: the localv1 fan-out measured in docs/performance.md (1,000 node
// agents). Fanning out to more nodes is globalv1's job, each node agent
// computing its own view.
const DefaultMaxNodeViews = 1000

// DefaultChunkBytes is the default bound of a message's encoded size: a
// quarter of gRPC's default receive limit, so that a client with default
// settings receives any batch, however large its objects.
const DefaultChunkBytes = 1 << 20

// Server serves one cluster store.
type Server struct {
	store *cluster.Store
	opts  Options

	mu       sync.Mutex
	ctx      context.Context // lifetime of the views, set by Serve
	views    map[brain.Options]*nodeView
	releases uint64 // times a view lost its last watcher
	cluster  *clusterView
}

// New returns a server of store.
func New(store *cluster.Store, opts Options) *Server {
	if opts.HistorySize <= 0 {
		opts.HistorySize = DefaultHistorySize
	}
	if opts.IdleViewTimeout <= 0 {
		opts.IdleViewTimeout = 5 * time.Minute
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = 1000
	}
	if opts.MaxNodeViews <= 0 {
		opts.MaxNodeViews = DefaultMaxNodeViews
	}
	if opts.ChunkBytes <= 0 {
		opts.ChunkBytes = DefaultChunkBytes
	}
	return &Server{store: store, opts: opts, views: map[brain.Options]*nodeView{}}
}

// Serve serves both Watch services on lis until ctx ends (then it stops
// the server and returns nil) or serving fails.
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()

	// Clients ping idle connections (client.Dial: every 30 s) to notice a
	// vanished server; gRPC's default policy (one ping per 5 minutes) would
	// close them for it. 10 s is the fastest a gRPC client may ping.
	enforce := grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true})
	g := grpc.NewServer(append([]grpc.ServerOption{enforce}, opts...)...)
	localv1.RegisterWatchServer(g, localService{s: s})
	globalv1.RegisterWatchServer(g, globalService{s: s})
	s.serveHealth(ctx, g)
	done := make(chan error, 1)
	go func() { done <- g.Serve(lis) }()
	klog.FromContext(ctx).Info("Serving the localv1 and globalv1 Watch APIs", "address", lis.Addr().String())
	select {
	case <-ctx.Done():
		// Streams never end by themselves: Stop, not GracefulStop.
		g.Stop()
		<-done
		return nil
	case err := <-done:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return err
	}
}

func (s *Server) lifetime() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		return context.Background()
	}
	return s.ctx
}

// newInstanceID returns a random, non-zero instance ID: zero means "none"
// in a request.
func newInstanceID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}
