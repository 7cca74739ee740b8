//go:build e2e

package services

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// TestDetectLocalModes runs node-1's proxy in each --detect-local-mode and
// checks what the mode decides, as users see it: whether traffic from the
// node itself to a cluster IP is masqueraded (it is when the mode can tell
// pods from the rest), that pods' own traffic never is, that pods reach the
// external IP of an externalTrafficPolicy: Local service whose endpoints are
// elsewhere (the short-circuit for traffic known to come from a pod; dropped
// when the mode cannot tell), and internalTrafficPolicy: Local, which does
// not depend on the mode.
func TestDetectLocalModes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b netlab.Backend) {
		var local, remote, etp, itp, itpRemote *corev1.Service
		c := startCluster(t, b, defaultConfig(), func(l *netlab.Lab, s *netlab.State) {
			podA, podB, podC := l.Pod("pod-a"), l.Pod("pod-b"), l.Pod("pod-c")
			port := netlab.TCPPort("tcp", 80, targetPort)
			local = s.AddService("local-ep", port)
			s.SetEndpoints(local, netlab.Ready(podA)...)
			remote = s.AddService("remote-ep", port)
			s.SetEndpoints(remote, netlab.Ready(podC)...)
			etp = s.AddService("etp-local", port)
			etp.Spec.ExternalIPs = []string{"203.0.113.40", "2001:db8::40"}
			etp.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.SetEndpoints(etp, netlab.Ready(podC)...)
			itp = s.AddService("itp-local", port)
			itp.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
			s.SetEndpoints(itp, netlab.Ready(podB, podC)...)
			itpRemote = s.AddService("itp-local-remote", port)
			itpRemote.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
			s.SetEndpoints(itpRemote, netlab.Ready(podC)...)
		})
		podA, n1 := c.pod("pod-a"), c.node("node-1")
		cidrs := []netip.Prefix{netlab.ClusterCIDRv4, netlab.ClusterCIDRv6}
		type mode struct {
			mode    string
			cfg     netlab.ProxyConfig
			detects bool
		}
		var extra []mode
		if !strings.HasPrefix(b.Name(), "kube-proxy-") {
			// kpng's own mode, which kube-proxy does not accept.
			extra = append(extra, mode{"None", netlab.ProxyConfig{DetectLocalMode: "None"}, false})
		}
		modes := append([]mode{
			{"NodeCIDR", netlab.ProxyConfig{DetectLocalMode: "NodeCIDR"}, true},
			{"BridgeInterface", netlab.ProxyConfig{DetectLocalMode: "BridgeInterface", Extra: []string{"--pod-bridge-interface=" + netlab.PodBridge}}, true},
			// Routed pod traffic arrives on the bridge, whose name has the
			// prefix (the pods' own interfaces are in their namespaces).
			{"InterfaceNamePrefix", netlab.ProxyConfig{DetectLocalMode: "InterfaceNamePrefix", Extra: []string{"--pod-interface-name-prefix=kpbr"}}, true},
			// ClusterCIDR without --cluster-cidr detects nothing, as in
			// kube-proxy.
			{"ClusterCIDR-without-CIDRs", netlab.ProxyConfig{DetectLocalMode: "ClusterCIDR"}, false},
			{"ClusterCIDR", netlab.ProxyConfig{DetectLocalMode: "ClusterCIDR", ClusterCIDRs: cidrs}, true},
		}, extra...)
		if differs(t, b, "detect-local-mode") {
			// No modes: what a mode that tells pods from the rest decides.
			modes = []mode{{"without-modes", netlab.ProxyConfig{}, true}}
		}
		// to-ipvs masquerades the node's connections to a cluster IP
		// without detection too, and never short-circuits a pod's
		// connection to an external IP of a Local policy.
		masqueradedAnyway := differs(t, b, "node-source-without-detection")
		shortCircuit := !differs(t, b, "no-short-circuit")
		for _, tc := range modes {
			t.Run(tc.mode, func(t *testing.T) {
				// Restart node-1's proxy in the mode: it reconciles the
				// rules of the previous mode.
				if err := c.procs[n1].Stop(); err != nil {
					t.Fatal(err)
				}
				c.procs[n1] = b.Start(t, n1, c.state.Path, tc.cfg)
				c.procs[n1].WaitOutput(t, b.SyncedLine(), firstSyncTimeout)
				for _, fam := range families {
					// Pod to a remote endpoint: never masqueraded.
					r := netlab.Eventually(t, settle, prober(&podA.Host, netlab.TCP, netlab.ClusterIP(remote, fam, 80)), netlab.Answered("pod-c"))
					if r.Peer.Addr() != podA.Addr(fam) {
						t.Errorf("%s pod-a -> remote-ep: pod-c saw %s; want pod-a's own %s", ipv(fam), r.Peer.Addr(), podA.Addr(fam))
					}

					// Node to a same-node endpoint: masqueraded (to the
					// bridge address) when the mode tells pods from the rest.
					r = netlab.Eventually(t, settle, prober(&n1.Host, netlab.TCP, netlab.ClusterIP(local, fam, 80)), netlab.Answered("pod-a"))
					want := n1.Addr(fam)
					if tc.detects || masqueradedAnyway {
						want = gateway(n1, fam)
					}
					if r.Peer.Addr() != want {
						t.Errorf("%s node-1 -> local-ep: pod-a saw %s; want %s (masquerade expected: %v)", ipv(fam), r.Peer.Addr(), want, tc.detects)
					}

					// internalTrafficPolicy: Local, whatever the mode:
					// node-1's pods and node-1 itself reach node-1's
					// endpoint only, and nothing when node-1 has none.
					for _, client := range []*netlab.Host{&podA.Host, &n1.Host} {
						dial := prober(client, netlab.TCP, netlab.ClusterIP(itp, fam, 80))
						netlab.Eventually(t, settle, dial, netlab.Answered("pod-b"))
						expectOnly(t, 20, dial, netlab.OK, "pod-b")
						expectOnly(t, 2, dialer(client, netlab.TCP, netlab.ClusterIP(itpRemote, fam, 80), dropTimeout), netlab.TimedOut, "")
					}

					// Pod to the external IP of an ETP Local service whose
					// only endpoint is on node-2.
					dial := prober(&podA.Host, netlab.TCP, addrOf(etp.Spec.ExternalIPs, fam, 80))
					if !tc.detects || !shortCircuit {
						expectOnly(t, 3, dialer(&podA.Host, netlab.TCP, addrOf(etp.Spec.ExternalIPs, fam, 80), dropTimeout), netlab.TimedOut, "")
						continue
					}
					r = netlab.Eventually(t, settle, dial, netlab.Answered("pod-c"))
					if r.Peer.Addr() != podA.Addr(fam) {
						t.Errorf("%s pod-a -> etp-local external IP: pod-c saw %s; want pod-a's own %s", ipv(fam), r.Peer.Addr(), podA.Addr(fam))
					}
				}
			})
		}
	})
}
