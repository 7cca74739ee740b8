package ebpf

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpng/kpng/backend"
)

// --dry-run loads nothing (no root, no BPF filesystem needed) and prints
// each sync's map writes.
func TestDryRunPrintsTheMapWrites(t *testing.T) {
	var out bytes.Buffer
	c := DefaultConfig()
	c.DryRun, c.PinPath = true, ""
	c.HealthzBindAddress, c.MetricsBindAddress = "", ""
	p := &Plugin{Config: c, set: true, Out: &out}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _, err := p.Open(ctx, backend.Env{})
	if err != nil {
		t.Fatal(err)
	}
	st := backend.NewState("node-1")
	se := svc("web", "10.96.0.10", "10.0.1.1:8080")
	k := backend.KeyOf(se)
	st.Services[k] = se
	if err := b.Sync(ctx, st, backend.Changes{Reset: true, Set: []backend.ServiceKey{k}}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"# sync: ", "10.96.0.10:80/tcp", "10.0.1.1:8080"} {
		if !strings.Contains(got, want) {
			t.Errorf("dry run printed:\n%s\nwant %q in it", got, want)
		}
	}
	out.Reset()
	if err := b.Sync(ctx, st, backend.Changes{}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "# sync: 0 map operations\n" {
		t.Errorf("a sync with no change printed %q", got)
	}
}

// The flags are kube-proxy's that mean something here, and the backend's
// own; the masquerade and local-traffic settings have none, so that a
// configuration setting them is told it cannot be applied.
func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("to-ebpf", flag.ContinueOnError)
	p := &Plugin{}
	p.BindFlags(fs)
	for _, name := range []string{"ebpf-pin-path", "ebpf-cgroup-path", "ebpf-interfaces", "nodeport-addresses",
		"min-sync-period", "sync-period", "healthz-bind-address", "metrics-bind-address", "profiling", "dry-run", "ip-families"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	for _, name := range []string{"masquerade-all", "iptables-masquerade-bit", "cluster-cidr", "detect-local-mode"} {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s is a flag, but the backend has no use for it", name)
		}
	}
	if err := fs.Parse([]string{"--nodeport-addresses=192.168.0.0/16", "--ip-families=ipv4", "--min-sync-period=0s"}); err != nil {
		t.Fatal(err)
	}
	c := p.config()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.NodePortAddresses) != 1 || c.NodePortAddresses[0] != "192.168.0.0/16" || len(c.IPFamilies) != 1 || c.MinSyncPeriod != 0 {
		t.Errorf("parsed flags: %+v", c.Config)
	}
	if err := fs.Parse([]string{"--nodeport-addresses=nonsense"}); err == nil {
		if c := p.config(); c.Validate() == nil {
			t.Error("--nodeport-addresses=nonsense was accepted")
		}
	}
}

// --cleanup deletes the pin folder only on a BPF filesystem: a pin path
// configured to an ordinary folder is refused and left whole.
func TestRemoveRefusesAFolderNotOnBPFFS(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "precious")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir); err == nil || !strings.Contains(err.Error(), "not on a BPF filesystem") {
		t.Errorf("Remove(%s) = %v, want a refusal", dir, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("Remove deleted what it refused: %v", err)
	}
	if err := Remove(filepath.Join(dir, "absent")); err != nil {
		t.Errorf("Remove of a folder that does not exist: %v", err)
	}
}
