//go:build e2e

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// TestBackendsWithoutCapNetAdminSaySo runs each kernel backend, in a node's
// network namespace, without CAP_NET_ADMIN (as root with the capability
// dropped from its bounding set, and as an unprivileged user, both with
// util-linux's setpriv): kpng exits saying it needs the
// capability, instead of nft's or iptables' own messages, which do not say
// why (or mislead: "is iptables installed?").
func TestBackendsWithoutCapNetAdminSaySo(t *testing.T) {
	netlab.RequireRoot(t)
	// A copy the unprivileged user can run (the built one is under root's
	// home).
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(netlab.KpngBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	kpng := filepath.Join(dir, "kpng")
	if err := os.WriteFile(kpng, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cluster, err := filepath.Abs("../../../examples/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clusterCopy := filepath.Join(dir, "cluster.yaml")
	if data, err = os.ReadFile(cluster); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(clusterCopy, data, 0o644); err != nil {
		t.Fatal(err)
	}

	lab := netlab.New(t, netlab.Spec{Nodes: []netlab.NodeSpec{{Name: "node-1"}}})
	node := lab.Nodes[0]
	for _, b := range []struct{ name, what string }{{"nft", "nftables"}, {"iptables", "iptables"}} {
		args := []string{kpng, "file", "--input", clusterCopy, "to-local", "--node-name", "node-1", "to-" + b.name, "--metrics-bind-address=", "--healthz-bind-address="}
		for _, who := range []struct {
			name, hint string
			wrap       []string
		}{
			{"root without CAP_NET_ADMIN", "it runs as root but without the capability", []string{"setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin"}},
			{"an unprivileged user", "run as root", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"}},
		} {
			t.Run(b.name+" as "+who.name, func(t *testing.T) {
				argv := append(append([]string{}, who.wrap...), args...)
				out, err := node.Run(argv...)
				if err == nil {
					t.Fatalf("%q succeeded, want a failure:\n%s", argv, out)
				}
				want := "kpng: " + b.name + ": " + b.what + ": operation not permitted: kpng needs CAP_NET_ADMIN (" + who.hint
				if !strings.Contains(out, want) {
					t.Errorf("%q: output does not say %q:\n%s", argv, want, out)
				}
			})
		}
	}
}
