package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/sink/tofile"
)

// views receives, from the to-test-view backend, the YAML of each state it
// is given: the backend that `kpng local` runs in these tests.
var views = make(chan []byte, 16)

type viewPlugin struct{}

func (viewPlugin) BindFlags(*flag.FlagSet) {}

func (viewPlugin) Cleanup(context.Context) error { return nil }

func (viewPlugin) Open(context.Context, backend.Env) (backend.Backend, backend.Options, error) {
	return backend.Func(func(_ context.Context, st *backend.State, _ backend.Changes) error {
		doc, err := tofile.Marshal(&localv1.NodeState{NodeName: st.NodeName, Revision: st.Revision,
			Services: st.Sorted(), Node: st.Node, ServiceCidrs: st.ServiceCIDRs}, "yaml", true)
		if err != nil {
			return err
		}
		views <- doc
		return nil
	}), backend.Options{}, nil
}

func init() {
	backend.Register(backend.Registration{Name: "test-view", Short: "tests only: hands each state to the test",
		New: func() backend.Plugin { return viewPlugin{} }})
}

// start runs a long-lived kpng command until the test ends.
func start(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- execute(ctx, t, args...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kpng %v: %v", args, err)
		}
	})
}

// The README's tiers, as commands: a brain serving the example cluster
// (to-api), a node agent reading it over globalv1 (api), a second tier
// serving what the agent copied, a backend fed over localv1 (local), and
// to-file at the end of each: every node sees exactly the view that
// `kpng file ... to-file` computes in one process.
func TestAPICommandsServeTheSameView(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "cluster-node-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	brain, tier := filepath.Join(dir, "brain.sock"), filepath.Join(dir, "tier.sock")
	start(t, "file", "--input", "../../examples/cluster.yaml", "to-api", "--listen", "unix://"+brain)
	start(t, "api", "--api", "unix://"+brain, "to-api", "--listen", "unix://"+tier, "--socket-mode", "0660")

	for name, sock := range map[string]string{"brain": brain, "second tier": tier} {
		out := filepath.Join(dir, name+".yaml")
		// Clients retry until the server listens: no wait needed.
		if err := execute(context.Background(), t, "api", "--api", "unix://"+sock,
			"to-file", "--node-name", "node-1", "--output", out); err != nil {
			t.Fatalf("%s: kpng api ... to-file: %v", name, err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(golden) {
			t.Errorf("%s: kpng api ... to-file differs from kpng file ... to-file:\n%s", name, got)
		}
	}
	for sock, want := range map[string]os.FileMode{brain: 0o600, tier: 0o660} {
		if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %v", sock, fi.Mode(), err, want)
		}
	}

	start(t, "local", "--api", "unix://"+tier, "--node-name", "node-1", "to-test-view")
	select {
	case got := <-views:
		if string(got) != string(golden) {
			t.Errorf("kpng local ... to-test-view got another view than kpng file ... to-file:\n%s", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("kpng local: no view within a minute")
	}
}

// --max-node-views bounds the node views to-api computes: with one, a
// second node's backend is refused with an error naming the flag.
func TestToAPIMaxNodeViews(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "kpng.sock")
	start(t, "file", "--input", "../../examples/cluster.yaml", "to-api", "--listen", sock, "--max-node-views", "1")
	for len(views) > 0 { // states of other tests' backends
		<-views
	}
	start(t, "local", "--api", sock, "--node-name", "node-1", "to-test-view")
	select {
	case <-views:
	case <-time.After(time.Minute):
		t.Fatal("kpng local: no view within a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := execute(ctx, t, "local", "--api", sock, "--node-name", "node-2", "to-test-view")
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "--max-node-views") {
		t.Errorf("a second node's backend: %v, want an error naming --max-node-views", err)
	}
}
