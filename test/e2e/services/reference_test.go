//go:build e2e

package services

import (
	"strings"
	"testing"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// referenceBackend returns the backend called name that reads a real API
// server: upstream kube-proxy ("kube-proxy-nftables", "kube-proxy-iptables"),
// or kpng's backend B fed by kpng's kube source ("kube-B", e.g. "kube-nft"),
// as a node runs it (see netlab.KubeProxy and netlab.KpngKube). It returns
// nil for other names (kpng's file source).
func referenceBackend(t *testing.T, name string) netlab.Backend {
	if b, ok := strings.CutPrefix(name, "kube-"); ok && !strings.HasPrefix(b, "proxy-") {
		return netlab.KpngKube(b)
	}
	mode, ok := strings.CutPrefix(name, "kube-proxy-")
	if !ok {
		return nil
	}
	if mode != "nftables" && mode != "iptables" {
		t.Fatalf("unknown reference backend %q: kube-proxy-nftables or kube-proxy-iptables", name)
	}
	return netlab.KubeProxy(mode)
}
