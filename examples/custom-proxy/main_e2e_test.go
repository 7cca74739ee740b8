//go:build e2e

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// kubeProxyConfig is a kube-proxy v1alpha1 file as kubeadm writes one, for
// node-1 of a netlab lab; its argument is the API server's kubeconfig. The
// conntrack settings are those a network namespace allows (nf_conntrack_max
// is the host's).
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %s
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`

// TestCustomProxyProgramsServices builds this example, runs it in node-1 of
// a lab with kube-proxy's --config file and flags, against a real
// kube-apiserver holding a NodePort Service with three pods (two on node-1,
// one on node-2), and sends real packets: from node-1 to the ClusterIP and
// from the external client to node-1's NodePort, in IPv4 and IPv6, each
// answered by every pod in turn. Its health and metrics servers answer as
// kube-proxy's, and --cleanup removes its table.
func TestCustomProxyProgramsServices(t *testing.T) {
	netlab.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "custom-proxy")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	lab := netlab.New(t, netlab.DefaultSpec())
	node := lab.Node("node-1")
	state := netlab.NewState(t, lab)
	const nodePort = 30080
	svc := state.AddService("web", netlab.TCPPort("http", 80, netlab.DefaultPorts[0]))
	svc.Spec.Type = "NodePort"
	svc.Spec.Ports[0].NodePort = nodePort
	state.SetEndpoints(svc, netlab.Ready(lab.Pods()...)...)
	state.Write(t)
	mirror := netlab.StartMirror(t, state.Path)
	mirror.Forward(t, node)

	file := filepath.Join(t.TempDir(), "kube-proxy.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(kubeProxyConfig, mirror.Server.KubeconfigPath)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A flag over the file, as kube-proxy takes it.
	proc := node.Start(t, bin, "--config", file, "--hostname-override", "Node-1")
	proc.WaitOutput(t, "Dataplane synced", time.Minute)

	pods := []string{"pod-a", "pod-b", "pod-c"}
	for _, fam := range []int{4, 6} {
		for _, tc := range []struct {
			name string
			from *netlab.Host
			dst  netip.AddrPort
		}{
			{fmt.Sprintf("IPv%d node-1 -> ClusterIP", fam), &node.Host, netlab.ClusterIP(svc, fam, 80)},
			{fmt.Sprintf("IPv%d external -> NodePort of node-1", fam), lab.External, netip.AddrPortFrom(node.Addr(fam), nodePort)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				netlab.Eventually(t, 10*time.Second, func() netlab.Result { return tc.from.TCP(tc.dst) }, netlab.Answered(pods...))
				// A generous timeout: a loaded machine may be slow to
				// schedule the pods' servers, which is not the proxy's doing.
				spread := netlab.Spread(60, func() netlab.Result { return tc.from.Dial(netlab.TCP, tc.dst, 5*time.Second) })
				for _, p := range pods {
					if spread[p] == 0 {
						t.Errorf("%s: %s never answered in 60 connections: %s", tc.dst, p, netlab.FormatSpread(spread))
					}
				}
				if len(spread) != len(pods) {
					t.Errorf("%s: %s", tc.dst, netlab.FormatSpread(spread))
				}
			})
		}
	}

	// kube-proxy's health and metrics servers.
	for _, page := range []struct{ url, want string }{
		{"http://127.0.0.1:10256/healthz", `"nodeEligible":true`},
		{"http://127.0.0.1:10249/configz", `"mode":"nftables"`},
		{"http://127.0.0.1:10249/metrics", "kubeproxy_sync_proxy_rules_duration_seconds_count"},
		{"http://127.0.0.1:10249/proxyMode", "nftables"},
	} {
		if r := node.HTTPGet(page.url, 5*time.Second); r.Outcome != netlab.OK || r.Status != 200 || !strings.Contains(r.Body, page.want) {
			t.Errorf("%s: %v, want 200 with %q", page.url, r, page.want)
		}
	}

	if err := proc.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tables(t, node), "kpng") {
		t.Fatalf("no kpng table after the proxy stopped (it leaves its rules, as kube-proxy):\n%s", tables(t, node))
	}
	if out, err := node.Run(bin, "--config", file, "--cleanup"); err != nil {
		t.Fatalf("--cleanup: %v\n%s", err, out)
	}
	if got := tables(t, node); strings.Contains(got, "kpng") {
		t.Errorf("--cleanup left the table:\n%s", got)
	}
}

// tables lists the nftables tables of node.
func tables(t *testing.T, node *netlab.Node) string {
	t.Helper()
	out, err := node.Run("nft", "list", "tables")
	if err != nil {
		t.Fatalf("nft list tables: %v\n%s", err, out)
	}
	return out
}
