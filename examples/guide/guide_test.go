package guide_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/examples/guide"
	"github.com/kpng/kpng/local"
	"github.com/kpng/kpng/local/backendtest"
	"github.com/kpng/kpng/server"
	"github.com/kpng/kpng/source/file"
)

// guard bounds the waits: reaching it is a hang, not a measure of speed.
const guard = time.Minute

// wantNode1 is what node-1 (zone-a) must implement for examples/cluster.yaml,
// worked out from the file:
//   - web (dual-stack, PreferClose): the IPv4 slice has zone hints, so node-1
//     uses only the zone-a endpoint; the IPv6 slice has none: all of them;
//   - cart (internalTrafficPolicy Local): only node-1's endpoint;
//   - not-yet-deployed: no endpoints anywhere, connections are rejected;
//   - db (headless), upstream (ExternalName), metrics (another proxy's):
//     not in the view at all.
var wantNode1 = map[string]string{
	"default/not-yet-deployed/IPV4/http": "TCP 10.96.0.99:80 reject",
	"default/web/IPV4/http":              "TCP 10.96.0.10:80 -> 10.244.1.5:8080",
	"default/web/IPV4/https":             "TCP 10.96.0.10:443 -> 10.244.1.5:8443",
	"default/web/IPV6/http":              "TCP [fd00:10:96::10]:80 -> [fd00:10:244:1::5]:8080 [fd00:10:244:2::7]:8080",
	"default/web/IPV6/https":             "TCP [fd00:10:96::10]:443 -> [fd00:10:244:1::5]:8443 [fd00:10:244:2::7]:8443",
	"kube-system/kube-dns/IPV4/dns":      "UDP 10.96.0.53:53 -> 10.244.2.3:53 10.244.3.3:53",
	"kube-system/kube-dns/IPV4/dns-tcp":  "TCP 10.96.0.53:53 -> 10.244.2.3:53 10.244.3.3:53",
	"shop/cart/IPV4/grpc":                "TCP 10.96.1.30:9000 -> 10.244.1.30:9000",
	"shop/frontend/IPV4/http":            "TCP 10.96.1.20:80 -> 10.244.1.20:8080 10.244.2.20:8080 10.244.3.20:8080",
}

// TestRuleBackendFromAFile is the guide's first test: the state a backend
// gets for a node, from a file, without a cluster.
func TestRuleBackendFromAFile(t *testing.T) {
	st, ch := backendtest.StateFromFile(t, "../cluster.yaml", "node-1")
	b := guide.NewRuleBackend()
	if err := b.Sync(context.Background(), st, ch); err != nil {
		t.Fatal(err)
	}
	if got := b.Rules(); !maps.Equal(got, wantNode1) {
		t.Errorf("rules:\n got %q\nwant %q", got, wantNode1)
	}
	for _, op := range b.LastOps() {
		if !strings.HasPrefix(op, "created ") {
			t.Errorf("first sync: %q, want only creations", op)
		}
	}
}

// TestRuleBackendFollowsChanges drives the backend through a change of the
// file: only the rules of the changed Service are written.
func TestRuleBackendFollowsChanges(t *testing.T) {
	data, err := os.ReadFile("../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := backendtest.NewCluster("node-1")
	c.Apply(t, data)
	b := guide.NewRuleBackend()
	st, ch := c.Next(t)
	if err := b.Sync(context.Background(), st, ch); err != nil {
		t.Fatal(err)
	}

	c.Apply(t, []byte(strings.Replace(string(data), "name: not-yet-deployed", "name: deployed-later", 1)))
	st, ch = c.Next(t)
	if ch.Reset || len(ch.Set) != 1 || len(ch.Deleted) != 1 {
		t.Errorf("changes: %v, want one service set and one deleted", ch)
	}
	if err := b.Sync(context.Background(), st, ch); err != nil {
		t.Fatal(err)
	}
	want := []string{"created default/deployed-later/IPV4/http", "deleted default/not-yet-deployed/IPV4/http"}
	if got := b.LastOps(); !slices.Equal(got, want) {
		t.Errorf("operations: %q, want %q", got, want)
	}
}

// serveExample serves examples/cluster.yaml on a unix socket, as
// `kpng file --input examples/cluster.yaml to-api --listen unix://...`.
func serveExample(t *testing.T) (*cluster.Store, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	store := cluster.NewStore()
	if err := (&file.Source{Path: "../cluster.yaml"}).Run(ctx, store); err != nil {
		t.Fatal(err)
	}
	target := "unix://" + filepath.Join(t.TempDir(), "kpng.sock")
	lis, _, err := server.Listen(target, server.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- server.New(store, server.Options{}).Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return store, target
}

// runUntil runs fn until the test ends, failing the test if it fails.
func runUntil(t *testing.T, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// waitSynced calls ok after each sync until it holds.
func waitSynced(t *testing.T, synced <-chan struct{}, ok func() bool, what string) {
	t.Helper()
	timeout := time.After(guard)
	for !ok() {
		select {
		case <-synced:
		case <-timeout:
			t.Fatalf("%s: never reached", what)
		}
	}
}

func notify() (chan struct{}, backend.Options) {
	ch := make(chan struct{}, 1)
	return ch, backend.Options{OnSync: func(backend.SyncResult) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}}
}

// TestSameBackendInProcessAndOverGRPC runs the guide's backends both ways:
// in process (to-local) and out of process (client), with the same result.
func TestSameBackendInProcessAndOverGRPC(t *testing.T) {
	store, target := serveExample(t)
	web := backend.ServiceKey{Namespace: "default", Name: "web", Family: localv1.IPFamily_IPV4}

	t.Run("full state", func(t *testing.T) {
		inProcess, overGRPC := guide.NewRuleBackend(), guide.NewRuleBackend()
		synced, opts := notify()
		runUntil(t, func(ctx context.Context) error {
			return backend.Run(ctx, local.NewFeed(store, brain.Options{NodeName: "node-1"}), inProcess, opts)
		})
		runUntil(t, func(ctx context.Context) error {
			return client.RunBackend(ctx, target, "node-1", overGRPC, client.WithRunOptions(opts))
		})
		waitSynced(t, synced, func() bool {
			return maps.Equal(inProcess.Rules(), wantNode1) && maps.Equal(overGRPC.Rules(), wantNode1)
		}, "both backends hold node-1's rules")
	})

	t.Run("incremental", func(t *testing.T) {
		inProcess, overGRPC := &guide.Counter{}, &guide.Counter{}
		inProcess.Reset()
		synced, opts := notify()
		runUntil(t, func(ctx context.Context) error {
			return backend.Run(ctx, local.NewFeed(store, brain.Options{NodeName: "node-1"}), backend.FromIncremental(inProcess), opts)
		})
		runUntil(t, func(ctx context.Context) error {
			return guide.RunCounter(ctx, target, "node-1", overGRPC, client.WithRunOptions(opts))
		})
		// web/v4 has 2 endpoints on node-1's view (http and https of the
		// zone-a pod; the others are hinted to zone-b, and not listed).
		waitSynced(t, synced, func() bool {
			a, b := inProcess.Endpoints(), overGRPC.Endpoints()
			return len(a) == 6 && maps.Equal(a, b)
		}, "both counters hold node-1's six services")
		if n := overGRPC.Endpoints()[web]; n == 0 {
			t.Errorf("web/v4: no endpoints")
		}
	})
}

// lines is an io.Writer that signals each write.
type lines struct {
	mu    sync.Mutex
	b     strings.Builder
	wrote chan struct{}
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	select {
	case l.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *lines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

func TestPrintChanges(t *testing.T) {
	store, target := serveExample(t)
	out := &lines{wrote: make(chan struct{}, 1)}
	runUntil(t, func(ctx context.Context) error { return guide.PrintChanges(ctx, target, "node-1", out) })
	waitSynced(t, out.wrote, func() bool { return out.has("reset: 6 services\n") }, "the first view")
	store.Update(func(tx *cluster.Tx) { tx.DeleteService("shop", "cart") })
	waitSynced(t, out.wrote, func() bool { return out.has("deleted shop/cart/v4\n") }, "the deletion")
}
