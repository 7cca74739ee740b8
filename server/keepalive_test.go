package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// A stream with nothing to send for a while is kept, not closed for its
// client's keepalive pings (gRPC servers allow one per 5 minutes by default;
// kpng's client pings an idle connection every 30 s, and gRPC's fastest is
// 10 s, used here: the default policy closes the connection after three).
func TestIdleStreamSurvivesClientKeepalives(t *testing.T) {
	t.Parallel()
	store := newCluster(3, 1)
	ts := serve(t, store, "unix", server.Options{}, server.ListenOptions{})
	raw := openRaw(t, ts.addr, "node-0", 0, 0,
		client.WithDialOptions(grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second})))
	raw.batch(t)
	raw.ask(t)
	// Idle for four ping intervals; the test's waits are bounded by guard.
	time.Sleep(45 * time.Second)
	store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(1, 1, 1)) })
	ops, _ := raw.batch(t) // fails if the stream was closed
	if len(ops) < 2 {
		t.Errorf("batch after the idle time: %q", opNames(ops))
	}
}
