//go:build e2e

package services

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// TestMigration follows docs/migrating-from-kube-proxy.md on every node of
// a cluster that upstream kube-proxy serves, under constant probe traffic:
// stop kube-proxy (its rules stay and keep serving), start kpng proxy with
// kube-proxy's own command line, and kpng removes kube-proxy's rules once
// its own are in place. Then the rollback: stop kpng, start kube-proxy
// again, and once it has synced, `kpng cleanup --kube-proxy=false`. No
// probe may fail either way, and neither proxy's rules may be left behind.
func TestMigration(t *testing.T) {
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			kp := netlab.KubeProxy(mode)
			var web, np *corev1.Service
			c := startCluster(t, kp, defaultConfig(), func(l *netlab.Lab, s *netlab.State) {
				web = s.AddService("web", netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort))
				s.SetEndpoints(web, netlab.Ready(l.Pod("pod-b"), l.Pod("pod-c"))...)
				np = s.AddService("np", netlab.TCPPort("tcp", 80, targetPort))
				nodePorts(np, 30082)
				s.SetEndpoints(np, netlab.Ready(l.Pod("pod-a"), l.Pod("pod-c"))...)
			})
			podA, ext := c.pod("pod-a"), c.lab.External
			var probes []trafficProbe
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					probes = append(probes, trafficProbe{fmt.Sprintf("%s %s pod-a -> ClusterIP", ipv(fam), proto), prober(&podA.Host, proto, netlab.ClusterIP(web, fam, 80))})
				}
				for _, n := range c.lab.Nodes {
					probes = append(probes, trafficProbe{fmt.Sprintf("%s TCP external -> NodePort of %s", ipv(fam), n.Name), prober(ext, netlab.TCP, netip.AddrPortFrom(n.Addr(fam), 30082))})
				}
			}
			for _, p := range probes {
				netlab.Eventually(t, settle, p.dial, netlab.Answered())
			}
			run := startProbes(probes)

			kpngArgv := func(n *netlab.Node) []string {
				m := kp.Mirrors.ForNode(t, n, c.state.Path)
				argv := kp.Argv(t, n, m.Server.KubeconfigPath, c.cfg)
				return append([]string{netlab.KpngBinary(t), "proxy"}, argv[1:]...)
			}

			// kube-proxy -> kpng, node by node.
			for _, n := range c.lab.Nodes {
				if err := c.procs[n].Stop(); err != nil {
					t.Fatal(err)
				}
				p := n.Start(t, kpngArgv(n)...)
				p.WaitOutput(t, "Dataplane synced", firstSyncTimeout)
				p.WaitOutput(t, "Removed kube-proxy's rules", syncTimeout)
				c.procs[n] = p
			}
			for _, n := range c.lab.Nodes {
				// KUBE-FIREWALL is the kubelet's chain, which kube-proxy's
				// iptables mode also writes and its own cleanup keeps.
				if left := without(rulesMatching(t, n, "kube-proxy", "KUBE-"), "KUBE-FIREWALL"); len(left) > 0 {
					t.Errorf("node %s: kube-proxy's rules left after kpng took over:\n%s", n.Name, join(left))
				}
			}

			// kpng -> kube-proxy (rollback), node by node.
			for _, n := range c.lab.Nodes {
				if err := c.procs[n].Stop(); err != nil {
					t.Fatal(err)
				}
				m := kp.Mirrors.ForNode(t, n, c.state.Path)
				p := n.Start(t, kp.Argv(t, n, m.Server.KubeconfigPath, c.cfg)...)
				// kube-proxy syncs each family on its own: kpng's rules go
				// once both of kube-proxy's are in place.
				p.WaitOutput(t, `"SyncProxyRules complete" ipFamily="IPv4"`, firstSyncTimeout)
				p.WaitOutput(t, `"SyncProxyRules complete" ipFamily="IPv6"`, firstSyncTimeout)
				c.procs[n] = p
				if out, err := n.Run(netlab.KpngBinary(t), "cleanup", "--kube-proxy=false"); err != nil {
					t.Fatalf("node %s: kpng cleanup --kube-proxy=false: %v\n%s", n.Name, err, out)
				}
			}
			for _, n := range c.lab.Nodes {
				if left := rulesMatching(t, n, "kpng", "KPNG-"); len(left) > 0 {
					t.Errorf("node %s: kpng's rules left after the rollback:\n%s", n.Name, join(left))
				}
				if kube := rulesMatching(t, n, "kube-proxy", "KUBE-"); len(kube) == 0 {
					t.Errorf("node %s: no kube-proxy rule after the rollback: did kpng cleanup remove them?", n.Name)
				}
			}

			// Probes keep going until both migrations are done, and a
			// little after: each must have answered all along.
			for _, p := range probes {
				netlab.Eventually(t, settle, p.dial, netlab.Answered())
			}
			sent, failures := run.stop(t)
			total := 0
			for _, p := range probes {
				total += sent[p.name]
				if fs := failures[p.name]; len(fs) > 0 {
					t.Errorf("%s: %d of %d probes failed, first: %v", p.name, len(fs), sent[p.name], fs[0])
				}
			}
			t.Logf("kube-proxy %s -> kpng -> kube-proxy on %d nodes: %d probes", mode, len(c.lab.Nodes), total)
		})
	}
}

// trafficProbe is one kind of traffic a test keeps sending.
type trafficProbe struct {
	name string
	dial func() netlab.Result
}

// probeRun sends each probe (a netlab.Host.Probe: judged by the kernel's
// record of drops, not by the test process's clock) every 20 ms until
// stop. It also watches the test process for stalls, which stop reports
// beside failures: they explain a slow test, never a failed probe.
type probeRun struct {
	mu       sync.Mutex
	sent     map[string]int
	failures map[string][]netlab.Result
	stalls   *netlab.StallWatch
	done     chan struct{}
	wg       sync.WaitGroup
}

func startProbes(probes []trafficProbe) *probeRun {
	r := &probeRun{sent: map[string]int{}, failures: map[string][]netlab.Result{},
		stalls: netlab.WatchStalls(), done: make(chan struct{})}
	for _, p := range probes {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.done:
					return
				case <-tick.C:
				}
				res := p.dial()
				r.mu.Lock()
				r.sent[p.name]++
				if res.Outcome != netlab.OK {
					r.failures[p.name] = append(r.failures[p.name], res)
				}
				r.mu.Unlock()
			}
		}()
	}
	return r
}

// stop ends the traffic and returns the probes sent and the failures of
// each; with failures, it logs the test process's longest stall.
func (r *probeRun) stop(t *testing.T) (map[string]int, map[string][]netlab.Result) {
	t.Helper()
	close(r.done)
	r.wg.Wait()
	r.stalls.Stop()
	if len(r.failures) > 0 {
		longest, at := r.stalls.Longest()
		t.Logf("the test process's longest stall: %v, until %s", longest.Round(time.Millisecond), at.Format("15:04:05.000"))
	}
	return r.sent, r.failures
}

// without returns the rules that do not mention s.
func without(rules []string, s string) []string {
	var out []string
	for _, r := range rules {
		if !strings.Contains(r, s) {
			out = append(out, r)
		}
	}
	return out
}

// rulesMatching returns node n's firewall rules whose nftables table is
// called table, or whose text names a chain starting with chainPrefix.
func rulesMatching(t *testing.T, n *netlab.Node, table, chainPrefix string) []string {
	t.Helper()
	var out []string
	for _, r := range firewallRules(t, n) {
		if strings.HasPrefix(r, "nft ip "+table+" ") || strings.HasPrefix(r, "nft ip6 "+table+" ") || strings.Contains(r, chainPrefix) {
			out = append(out, r)
		}
	}
	return out
}
