//go:build e2e

package services

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// Addresses outside the lab's networks, routed by the external client to
// node-1 as a router or cloud load balancer would.
var (
	externalIPs = []string{"203.0.113.10", "2001:db8::10"}
	lbIPs       = []string{"203.0.113.20", "2001:db8::20"}
	lbLocalIPs  = []string{"203.0.113.21", "2001:db8::21"}
	// Those of a LoadBalancer service without endpoints.
	noEndpointsExternalIPs = []string{"203.0.113.30", "2001:db8::30"}
	noEndpointsLBIPs       = []string{"203.0.113.31", "2001:db8::31"}
	// Those of a LoadBalancer whose source ranges hold node-1's addresses.
	lbNodeRangeIPs = []string{"203.0.113.50", "2001:db8::50"}
)

// Node ports and health-check node ports of the services.
const (
	npCluster   = 30080
	npLocal     = 30081
	npLB        = 30082
	npLBLocal   = 30083
	npNoEps     = 30084
	npNodeRange = 30085
	hcLBLocal   = 32001
	targetPort  = 8080
)

// services are the services of the shared cluster, by name.
type services map[string]*corev1.Service

// defaultServices states every service of the shared cluster; each test uses
// its own, so tests do not disturb each other.
func defaultServices(svcs services) func(l *netlab.Lab, s *netlab.State) {
	return func(l *netlab.Lab, s *netlab.State) {
		a, b, c := l.Pod("pod-a"), l.Pod("pod-b"), l.Pod("pod-c")
		add := func(name string, eps []netlab.Endpoint, ports ...corev1.ServicePort) *corev1.Service {
			if len(ports) == 0 {
				ports = []corev1.ServicePort{netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort)}
			}
			svc := s.AddService(name, ports...)
			s.SetEndpoints(svc, eps...)
			svcs[name] = svc
			return svc
		}
		add("web", netlab.Ready(b, c))
		add("no-endpoints", nil)
		noEps := add("lb-no-endpoints", nil)
		loadBalancer(noEps, npNoEps, noEndpointsLBIPs)
		noEps.Spec.ExternalIPs = noEndpointsExternalIPs

		np := add("np", netlab.Ready(a, c))
		nodePorts(np, npCluster)
		npl := add("np-local", netlab.Ready(a, c))
		nodePorts(npl, npLocal)
		npl.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal

		ext := add("external-ips", netlab.Ready(b, c))
		ext.Spec.ExternalIPs = externalIPs

		lb := add("lb", netlab.Ready(c))
		loadBalancer(lb, npLB, lbIPs)
		lb.Spec.LoadBalancerSourceRanges = []string{netlab.ExternalV4.String() + "/32", netlab.ExternalV6.String() + "/128"}

		lbn := add("lb-node-range", netlab.Ready(c))
		loadBalancer(lbn, npNodeRange, lbNodeRangeIPs)
		n1 := l.Node("node-1")
		lbn.Spec.LoadBalancerSourceRanges = []string{n1.IPv4.String() + "/32", n1.IPv6.String() + "/128"}

		lbl := add("lb-local", netlab.Ready(a))
		loadBalancer(lbl, npLBLocal, lbLocalIPs)
		lbl.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		lbl.Spec.HealthCheckNodePort = hcLBLocal

		aff := add("affinity", netlab.Ready(a, b, c))
		aff.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		aff.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(300))}}
		short := add("affinity-1s", netlab.Ready(a, b, c))
		short.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		short.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(affinityShortTimeout / time.Second))}}

		add("hairpin", netlab.Ready(a))
		add("terminating", netlab.Terminating(b))
		add("terminating-and-ready", append(netlab.Ready(c), netlab.Terminating(b)...))
		add("changes", netlab.Ready(a))
		add("udp-conntrack", netlab.Ready(b))
		add("restart", netlab.Ready(c))
	}
}

func ptr[T any](v T) *T { return &v }

// nodePorts makes svc a NodePort service, each of its ports on nodePort.
func nodePorts(svc *corev1.Service, nodePort int) {
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = int32(nodePort)
	}
}

// loadBalancer makes svc a LoadBalancer service with ingress IPs ips.
func loadBalancer(svc *corev1.Service, nodePort int, ips []string) {
	nodePorts(svc, nodePort)
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
}

// addrOf returns the address of family fam among ips.
func addrOf(ips []string, fam int, port int) netip.AddrPort {
	for _, s := range ips {
		if a := netip.MustParseAddr(s); a.Is4() == (fam == 4) {
			return netip.AddrPortFrom(a, uint16(port))
		}
	}
	panic(fmt.Sprintf("no IPv%d address in %v", fam, ips))
}

// routeViaNode1 makes the external client send traffic for external and
// load-balancer IPs to node-1, as the network in front of a cluster does.
func routeViaNode1(t *testing.T, c *cluster) {
	t.Helper()
	n1 := c.node("node-1")
	for _, r := range [][]string{
		{"ip", "route", "add", "203.0.113.0/24", "via", n1.IPv4.String()},
		{"ip", "-6", "route", "add", "2001:db8::/64", "via", n1.IPv6.String()},
	} {
		if _, err := c.lab.External.Run(r...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServices runs the service semantics on one cluster per backend, every
// service stated up front and each subtest using its own.
func TestServices(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b netlab.Backend) {
		svcs := services{}
		c := startCluster(t, b, defaultConfig(), defaultServices(svcs))
		routeViaNode1(t, c)
		podA, podB, podC := c.pod("pod-a"), c.pod("pod-b"), c.pod("pod-c")
		n1, n2 := c.node("node-1"), c.node("node-2")
		ext := c.lab.External
		if !n1.BrNetfilter {
			t.Fatal("the kernel lacks br_netfilter: a pod cannot reach a same-node endpoint through a service; load br_netfilter")
		}

		t.Run("ClusterIP", func(t *testing.T) {
			web := svcs["web"]
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					for _, client := range []*netlab.Host{&podA.Host, &n1.Host, &podC.Host} {
						t.Run(fmt.Sprintf("%s/%s/from-%s", ipv(fam), proto, client.Name), func(t *testing.T) {
							dial := prober(client, proto, netlab.ClusterIP(web, fam, 80))
							netlab.Eventually(t, settle, dial, netlab.Answered())
							expectSpread(t, 40, dial, "pod-b", "pod-c")
						})
					}
				}
			}
		})

		t.Run("ClusterIP/pod-source-preserved", func(t *testing.T) {
			// Detect-local by cluster CIDR: traffic from a pod is not
			// masqueraded, to a same-node or a remote endpoint.
			for _, fam := range families {
				dial := prober(&podA.Host, netlab.TCP, netlab.ClusterIP(svcs["web"], fam, 80))
				for range 20 {
					if r := dial(); r.Outcome != netlab.OK || r.Peer.Addr() != podA.Addr(fam) {
						t.Fatalf("%s: %v; want pod-a's own address %s", ipv(fam), r, podA.Addr(fam))
					}
				}
			}
		})

		t.Run("ClusterIP/node-source-masqueraded", func(t *testing.T) {
			// From the node itself (not in the cluster CIDR) to a same-node
			// endpoint: masqueraded to the bridge address, so the reply
			// comes back through the node's conntrack.
			for _, fam := range families {
				r := netlab.Eventually(t, settle, prober(&n1.Host, netlab.TCP, netlab.ClusterIP(svcs["hairpin"], fam, 80)), netlab.Answered("pod-a"))
				if gw := gateway(n1, fam); r.Peer.Addr() != gw {
					t.Errorf("%s: pod-a saw %s; want the masqueraded bridge address %s", ipv(fam), r.Peer, gw)
				}
			}
		})

		t.Run("ClusterIP/unknown-port-refused", func(t *testing.T) {
			// kube-proxy's nftables mode rejects; its iptables mode has no
			// rule for it (the packet goes where the node routes the
			// address, nowhere in this lab). Each of kpng's backends
			// behaves as kube-proxy's mode of the same name.
			want := netlab.Refused
			if b.Name() == "kube-proxy-iptables" || b.Name() == "iptables" || differs(t, b, "unknown-port") {
				want = netlab.TimedOut
			}
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					expectOnly(t, 5, dialFor(want, &podA.Host, proto, netlab.ClusterIP(svcs["web"], fam, 81)), want, "")
				}
			}
		})

		t.Run("ClusterIP/no-endpoints-refused", func(t *testing.T) {
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					for _, client := range []*netlab.Host{&podA.Host, &n1.Host} {
						expectOnly(t, 5, prober(client, proto, netlab.ClusterIP(svcs["no-endpoints"], fam, 80)), netlab.Refused, "")
					}
				}
			}
		})

		t.Run("ClusterIP/unallocated-IP-dropped", func(t *testing.T) {
			// An address of the ServiceCIDR that no service has: dropped
			// (not rejected) by nftables-mode proxies; iptables-mode ones
			// leave it to the routes, which go nowhere in this lab.
			for _, fam := range families {
				p := netlab.ServiceCIDRv4
				if fam == 6 {
					p = netlab.ServiceCIDRv6
				}
				dst := netip.AddrPortFrom(nth(p.Addr(), 250), 80)
				expectOnly(t, 3, dialer(&podA.Host, netlab.TCP, dst, dropTimeout), netlab.TimedOut, "")
			}
		})

		t.Run("NodePort", func(t *testing.T) {
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					for _, via := range []*netlab.Node{n1, n2} {
						t.Run(fmt.Sprintf("%s/%s/via-%s", ipv(fam), proto, via.Name), func(t *testing.T) {
							dst := netip.AddrPortFrom(via.Addr(fam), npCluster)
							dial := prober(ext, proto, dst)
							netlab.Eventually(t, settle, dial, netlab.Answered())
							expectSpread(t, 40, dial, "pod-a", "pod-c")
							// Cluster policy: masqueraded to an address of
							// the node the client reached.
							for range 10 {
								r := dial()
								if r.Outcome == netlab.OK && r.Peer.Addr() != via.Addr(fam) && r.Peer.Addr() != gateway(via, fam) {
									t.Fatalf("%s saw %s; want a masqueraded address of %s (%s or %s)", r.Pod, r.Peer, via.Name, via.Addr(fam), gateway(via, fam))
								}
							}
						})
					}
				}
			}
		})

		t.Run("NodePort/ETP-Local", func(t *testing.T) {
			// Local policy: each node sends to its own endpoints only, and
			// the pod sees the client's own address.
			for _, fam := range families {
				for _, tc := range []struct {
					via *netlab.Node
					pod *netlab.Pod
				}{{n1, podA}, {n2, podC}} {
					dial := prober(ext, netlab.TCP, netip.AddrPortFrom(tc.via.Addr(fam), npLocal))
					netlab.Eventually(t, settle, dial, netlab.Answered())
					for range 20 {
						r := dial()
						if r.Outcome != netlab.OK || r.Pod != tc.pod.Name || r.Peer.Addr() != ext.Addr(fam) {
							t.Fatalf("%s via %s: %v; want %s seeing the client's address %s", ipv(fam), tc.via.Name, r, tc.pod.Name, ext.Addr(fam))
						}
					}
				}
			}
		})

		t.Run("NodePort/ETP-Local-no-local-endpoint-dropped", func(t *testing.T) {
			for _, fam := range families {
				netlab.Eventually(t, settle, prober(ext, netlab.TCP, netip.AddrPortFrom(n1.Addr(fam), npLBLocal)), netlab.Answered("pod-a"))
				expectOnly(t, 3, dialer(ext, netlab.TCP, netip.AddrPortFrom(n2.Addr(fam), npLBLocal), dropTimeout), netlab.TimedOut, "")
			}
		})

		t.Run("NodePort/no-endpoints-refused", func(t *testing.T) {
			// A service without endpoints rejects on its node port too,
			// from outside and from the node itself.
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					for _, client := range []*netlab.Host{ext, &n2.Host} {
						expectOnly(t, 3, prober(client, proto, netip.AddrPortFrom(n1.Addr(fam), npNoEps)), netlab.Refused, "")
					}
				}
			}
		})

		// From outside, what a Service without endpoints does on its
		// external and load-balancer IPs: refused.
		fromOutside := func(t *testing.T) netlab.Outcome {
			if differs(t, b, "no-endpoints-from-outside") {
				return netlab.TimedOut
			}
			return netlab.Refused
		}
		t.Run("ExternalIPs/no-endpoints-refused", func(t *testing.T) {
			fromOutside := fromOutside(t)
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					expectOnly(t, 3, dialFor(fromOutside, ext, proto, addrOf(noEndpointsExternalIPs, fam, 80)), fromOutside, "")
				}
			}
		})

		t.Run("LoadBalancer/no-endpoints-refused", func(t *testing.T) {
			fromOutside := fromOutside(t)
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					expectOnly(t, 3, dialFor(fromOutside, ext, proto, addrOf(noEndpointsLBIPs, fam, 80)), fromOutside, "")
					expectOnly(t, 3, prober(&podA.Host, proto, addrOf(noEndpointsLBIPs, fam, 80)), netlab.Refused, "")
				}
			}
		})

		t.Run("ExternalIPs", func(t *testing.T) {
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					dial := prober(ext, proto, addrOf(externalIPs, fam, 80))
					netlab.Eventually(t, settle, dial, netlab.Answered())
					expectSpread(t, 40, dial, "pod-b", "pod-c")
				}
			}
		})

		t.Run("LoadBalancer/source-ranges", func(t *testing.T) {
			for _, fam := range families {
				dst := addrOf(lbIPs, fam, 80)
				netlab.Eventually(t, settle, prober(ext, netlab.TCP, dst), netlab.Answered("pod-c"))
				expectOnly(t, 10, prober(ext, netlab.TCP, dst), netlab.OK, "pod-c")
				// pod-a is not in loadBalancerSourceRanges.
				if differs(t, b, "source-ranges-from-node") {
					expectOnly(t, 3, prober(&podA.Host, netlab.TCP, dst), netlab.OK, "pod-c")
					continue
				}
				expectOnly(t, 3, dialer(&podA.Host, netlab.TCP, dst, dropTimeout), netlab.TimedOut, "")
			}
		})

		t.Run("LoadBalancer/source-ranges-node-exception", func(t *testing.T) {
			// A load balancer that makes its VIP an address of the node
			// (an IP route rule, or the address itself): the node's own
			// connections to the VIP then leave from the VIP. When the
			// source ranges hold a node address, kube-proxy allows the VIP
			// as a source too, so that the node reaches its load balancer.
			for _, fam := range families {
				vip := addrOf(lbNodeRangeIPs, fam, 80)
				prefix := fmt.Sprintf("%s/%d", vip.Addr(), vip.Addr().BitLen())
				if _, err := n1.Run("ip", "addr", "add", prefix, "dev", "lo"); err != nil {
					t.Fatal(err)
				}
				// An IPv6 address is tentative until the kernel's address
				// work has run (on a loaded machine, a while), and a
				// tentative address is never a source: wait for it.
				waitUsable(t, &n1.Host, vip.Addr())
				r := netlab.Eventually(t, settle, prober(&n1.Host, netlab.TCP, vip), netlab.Answered("pod-c"))
				exception := !differs(t, b, "source-ranges-node-exception")
				if !exception && r.Local.Addr() != n1.Addr(fam) {
					t.Errorf("%s: node-1's connection left from %s, not from its address towards pod-c %s", ipv(fam), r.Local.Addr(), n1.Addr(fam))
				}
				if exception && r.Local.Addr() != vip.Addr() {
					t.Errorf("%s: node-1's connection left from %s, not from the VIP: the exception is not exercised", ipv(fam), r.Local.Addr())
				}
				if _, err := n1.Run("ip", "addr", "del", prefix, "dev", "lo"); err != nil {
					t.Fatal(err)
				}
				if !exception {
					expectOnly(t, 3, prober(&podA.Host, netlab.TCP, vip), netlab.OK, "pod-c")
					continue
				}
				// Anyone else outside the ranges is still dropped.
				expectOnly(t, 3, dialer(&podA.Host, netlab.TCP, vip, dropTimeout), netlab.TimedOut, "")
			}
		})

		t.Run("LoadBalancer/ETP-Local", func(t *testing.T) {
			for _, fam := range families {
				dst := addrOf(lbLocalIPs, fam, 80)
				r := netlab.Eventually(t, settle, prober(ext, netlab.TCP, dst), netlab.Answered("pod-a"))
				if r.Peer.Addr() != ext.Addr(fam) {
					t.Errorf("%s: pod-a saw %s; want the client's address %s", ipv(fam), r.Peer, ext.Addr(fam))
				}
			}
		})

		t.Run("HealthCheckNodePort", func(t *testing.T) {
			for _, fam := range families {
				for _, tc := range []struct {
					node   *netlab.Node
					status int
					local  int
				}{{n1, 200, 1}, {n2, 503, 0}} {
					url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(tc.node.Addr(fam), hcLBLocal))
					var r netlab.HTTPResult
					for end := time.Now().Add(settle); ; time.Sleep(100 * time.Millisecond) {
						if r = ext.HTTPGet(url, answerTimeout); r.Outcome == netlab.OK || time.Now().After(end) {
							break
						}
					}
					var body struct {
						Service        struct{ Namespace, Name string }
						LocalEndpoints int `json:"localEndpoints"`
					}
					if r.Outcome != netlab.OK || r.Status != tc.status || json.Unmarshal([]byte(r.Body), &body) != nil ||
						body.LocalEndpoints != tc.local || body.Service.Name != "lb-local" || body.Service.Namespace != "default" {
						t.Errorf("GET %s: %v; want HTTP %d with localEndpoints %d for default/lb-local", url, r, tc.status, tc.local)
					}
				}
			}
		})

		t.Run("SessionAffinity", func(t *testing.T) {
			for _, fam := range families {
				for _, client := range []*netlab.Host{&podA.Host, &n2.Host} {
					dial := prober(client, netlab.TCP, netlab.ClusterIP(svcs["affinity"], fam, 80))
					first := netlab.Eventually(t, settle, dial, netlab.Answered())
					expectOnly(t, 30, dial, netlab.OK, first.Pod)
				}
			}
		})

		t.Run("SessionAffinity/timeout-expires", func(t *testing.T) {
			// Within the timeout a client stays on its endpoint; once the
			// timeout passed without a new connection, the next one is
			// balanced afresh. Each fresh choice repeats the old endpoint
			// with probability 1/3, so a few rounds must show a change.
			// IPVS's persistence outlives a short timeout: there, every
			// round must reach the same endpoint.
			sticky := differs(t, b, "affinity-timeout")
			for _, fam := range families {
				dial := prober(&podA.Host, netlab.TCP, netlab.ClusterIP(svcs["affinity-1s"], fam, 80))
				prev := netlab.Eventually(t, settle, dial, netlab.Answered()).Pod
				expectOnly(t, 10, dial, netlab.OK, prev)
				changed, first := false, prev
				for round := 0; round < 12 && !changed; round++ {
					time.Sleep(affinityShortTimeout + 700*time.Millisecond)
					r := dial()
					if r.Outcome != netlab.OK {
						t.Fatalf("%s after the affinity timeout: %v", ipv(fam), r)
					}
					changed = r.Pod != prev
					prev = r.Pod
				}
				if sticky && changed {
					t.Errorf("%s: a connection made after the %v affinity timeout reached %s, not %s: IPVS persistence expired while connections it placed were in TIME_WAIT", ipv(fam), affinityShortTimeout, prev, first)
				}
				if !sticky && !changed {
					t.Errorf("%s: 12 connections each made after the %v affinity timeout all reached %s: the affinity does not expire", ipv(fam), affinityShortTimeout, prev)
				}
			}
		})

		t.Run("HealthAndMetrics", func(t *testing.T) {
			checkServers(t, b, n1, ext)
		})

		t.Run("Hairpin", func(t *testing.T) {
			// pod-a reaches itself through its service: masqueraded, or its
			// kernel would drop a packet from its own address.
			self := differs(t, b, "hairpin")
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					r := netlab.Eventually(t, settle, prober(&podA.Host, proto, netlab.ClusterIP(svcs["hairpin"], fam, 80)), netlab.Answered("pod-a"))
					if self && r.Peer.Addr() != podA.Addr(fam) {
						t.Errorf("%s %s: pod-a saw %s; want its own address %s", ipv(fam), proto, r.Peer, podA.Addr(fam))
					}
					if !self && r.Peer.Addr() == podA.Addr(fam) {
						t.Errorf("%s %s: pod-a saw its own address %s: hairpin traffic not masqueraded", ipv(fam), proto, r.Peer)
					}
				}
			}
		})

		t.Run("Terminating", func(t *testing.T) {
			for _, fam := range families {
				// Nothing ready: the serving, terminating endpoint is used.
				dial := prober(&podA.Host, netlab.TCP, netlab.ClusterIP(svcs["terminating"], fam, 80))
				netlab.Eventually(t, settle, dial, netlab.Answered("pod-b"))
				expectOnly(t, 10, dial, netlab.OK, "pod-b")
				// A ready endpoint exists: the terminating one gets nothing.
				dial = prober(&podA.Host, netlab.TCP, netlab.ClusterIP(svcs["terminating-and-ready"], fam, 80))
				netlab.Eventually(t, settle, dial, netlab.Answered("pod-c"))
				expectOnly(t, 20, dial, netlab.OK, "pod-c")
			}
		})

		t.Run("EndpointChanges", func(t *testing.T) {
			svc := svcs["changes"]
			for i, step := range []struct {
				eps  []*netlab.Pod
				want []string
			}{
				{[]*netlab.Pod{podA}, []string{"pod-a"}}, // as stated at start
				{[]*netlab.Pod{podB}, []string{"pod-b"}},
				{[]*netlab.Pod{podB, podC}, []string{"pod-b", "pod-c"}},
				{[]*netlab.Pod{podC}, []string{"pod-c"}},
			} {
				if i > 0 {
					c.state.SetEndpoints(svc, netlab.Ready(step.eps...)...)
					c.apply(t)
				}
				for _, fam := range families {
					dial := prober(&n2.Host, netlab.TCP, netlab.ClusterIP(svc, fam, 80))
					netlab.Eventually(t, settle, dial, func(r netlab.Result) bool {
						return r.Outcome == netlab.OK && slices.Contains(step.want, r.Pod) && r.Pod == step.want[len(step.want)-1]
					})
					expectSpread(t, 30, dial, step.want...)
				}
			}
		})

		t.Run("UDP-stale-conntrack-flushed", func(t *testing.T) {
			// A UDP client that keeps its source port stays on one conntrack
			// entry; when its endpoint goes, the proxy must delete that
			// entry, or the client keeps talking to the old endpoint (here
			// still alive, so a stale entry shows as its answer).
			svc := svcs["udp-conntrack"]
			clients := map[int]*netlab.UDPClient{}
			for _, fam := range families {
				u, err := podA.OpenUDP(netlab.ClusterIP(svc, fam, 80))
				if err != nil {
					t.Fatal(err)
				}
				defer u.Close()
				clients[fam] = u
				netlab.Eventually(t, settle, func() netlab.Result { return u.Exchange(answerTimeout) }, netlab.Answered("pod-b"))
			}
			c.state.SetEndpoints(svc, netlab.Ready(podC)...)
			c.apply(t)
			destroyed := differs(t, b, "udp-socket-destroyed")
			for _, fam := range families {
				u := clients[fam]
				if destroyed {
					// The socket fails (and never reaches pod-c); a new
					// socket reaches pod-c.
					r := netlab.Eventually(t, settle, func() netlab.Result { return u.Exchange(answerTimeout) }, func(r netlab.Result) bool { return r.Outcome != netlab.OK })
					if !errors.Is(r.Err, syscall.ECONNABORTED) && !errors.Is(r.Err, syscall.EDESTADDRREQ) {
						t.Errorf("%s: the socket connected to pod-b: %v; want it destroyed (ECONNABORTED, then EDESTADDRREQ)", ipv(fam), r)
					}
					netlab.Eventually(t, settle, prober(&podA.Host, netlab.UDP, netlab.ClusterIP(svc, fam, 80)), netlab.Answered("pod-c"))
					continue
				}
				netlab.Eventually(t, 5*time.Second, func() netlab.Result { return u.Exchange(answerTimeout) }, netlab.Answered("pod-c"))
			}
		})

		t.Run("Restart", func(t *testing.T) {
			restartWithoutDrop(t, c, svcs["restart"], "pod-c")
		})

		t.Run("Cleanup", func(t *testing.T) {
			// Last: it removes node-1's dataplane.
			p := c.procs[n1]
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			delete(c.procs, n1)
			b.Cleanup(t, n1, c.state.Path, c.cfg)
			got := firewallRules(t, n1)
			if b.Name() == "kube-proxy-iptables" {
				// Upstream's cleanup keeps KUBE-FIREWALL, which kubelet
				// also writes; kpng removes everything it wrote.
				got = slices.DeleteFunc(got, func(r string) bool { return strings.Contains(r, "KUBE-FIREWALL") })
			}
			if want := c.rulesBefore[n1]; !slices.Equal(got, want) {
				t.Errorf("after cleanup, node-1 has firewall rules:\n%s\nbefore the proxy started it had:\n%s", join(got), join(want))
			}
			if p := n1.PinPath(); p != "" {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("after cleanup, node-1's pin folder %s: %v; want it removed", p, err)
				}
			}
			for _, fam := range families {
				expectOnly(t, 2, dialer(&podA.Host, netlab.TCP, netlab.ClusterIP(svcs["web"], fam, 80), dropTimeout), netlab.TimedOut, "")
				// Nothing translates node-1's node port any more: its stack
				// refuses it as any closed port.
				expectOnly(t, 2, prober(ext, netlab.TCP, netip.AddrPortFrom(n1.Addr(fam), npCluster)), netlab.Refused, "")
			}
		})
	})
}

// affinityShortTimeout is the session affinity timeout of "affinity-1s".
const affinityShortTimeout = time.Second

// checkServers checks what a proxy serves beside its rules, at kube-proxy's
// default addresses: /healthz and /livez on every address (here asked from
// the neighbour), and /metrics and /proxyMode on the node's loopback, with
// the metrics of completed syncs. Each must answer: it is waited for as a
// probe is (netlab.ProbePatience of the test process's running time), since
// the proxy renders its answer on a CPU it shares with everything else
// (/metrics took over a second in hack/vm.sh's emulated VM at a host load
// of 10).
func checkServers(t *testing.T, b netlab.Backend, n *netlab.Node, from *netlab.Host) {
	t.Helper()
	for _, path := range []string{"/healthz", "/livez"} {
		for _, fam := range families {
			url := fmt.Sprintf("http://%s%s", netip.AddrPortFrom(n.Addr(fam), 10256), path)
			r := from.HTTPGet(url, netlab.ProbePatience)
			var body struct {
				LastUpdated string `json:"lastUpdated"`
				CurrentTime string `json:"currentTime"`
			}
			if r.Outcome != netlab.OK || r.Status != 200 || json.Unmarshal([]byte(r.Body), &body) != nil || body.LastUpdated == "" || body.CurrentTime == "" {
				t.Errorf("GET %s from %s: %v; want HTTP 200 with kube-proxy's JSON (lastUpdated, currentTime)", url, from.Name, r)
			}
		}
	}
	mode := modeOf(b)
	if r := n.HTTPGet("http://127.0.0.1:10249/proxyMode", netlab.ProbePatience); r.Outcome != netlab.OK || strings.TrimSpace(r.Body) != mode {
		t.Errorf("GET 127.0.0.1:10249/proxyMode in %s: %v; want %q", n.Name, r, mode)
	}
	r := n.HTTPGet("http://127.0.0.1:10249/metrics", netlab.ProbePatience)
	if r.Outcome != netlab.OK || r.Status != 200 {
		t.Fatalf("GET 127.0.0.1:10249/metrics in %s: %v", n.Name, r)
	}
	m := r.Body
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_duration_seconds_count\{ip_family="` + fam + `"\} [1-9][0-9]*$`),
			regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="` + fam + `"\} [1-9]`),
		} {
			if !want.MatchString(m) {
				t.Errorf("/metrics of %s lacks %s", n.Name, want)
			}
		}
	}
}

// modeOf is the proxy mode b reports on /proxyMode.
func modeOf(b netlab.Backend) string {
	if mode, ok := strings.CutPrefix(b.Name(), "kube-proxy-"); ok {
		return mode
	}
	name := strings.TrimPrefix(b.Name(), "kube-") // kpng's backend fed by its kube source
	if name == "nft" {
		return "nftables"
	}
	return name
}

// restartTimeout bounds each attempt made during a restart.
const restartTimeout = 3 * time.Second

// restartWithoutDrop restarts node-1's proxy while pod-a keeps a TCP
// connection open to svc (whose only endpoint is pod) and opens new ones
// without pause: none may fail, and the open one must still reach pod.
func restartWithoutDrop(t *testing.T, c *cluster, svc *corev1.Service, pod string) {
	podA, n1 := c.pod("pod-a"), c.node("node-1")
	streams := map[int]*netlab.Stream{}
	for _, fam := range families {
		dst := netlab.ClusterIP(svc, fam, 80)
		netlab.Eventually(t, settle, prober(&podA.Host, netlab.TCP, dst), netlab.Answered(pod))
		s, r := podA.OpenStream(dst, answerTimeout)
		if r.Outcome != netlab.OK {
			t.Fatalf("%s: open stream: %v", ipv(fam), r)
		}
		defer s.Close()
		streams[fam] = s
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	attempts, failures := 0, []string{}
	for _, fam := range families {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := netlab.ClusterIP(svc, fam, 80)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					// A generous timeout: on a loaded machine an answer can
					// be late, but a datagram or SYN lost in a restart is
					// still a failure (TCP retransmits a SYN after 1s, which
					// a user would not notice either).
					r := podA.Dial(proto, dst, restartTimeout)
					mu.Lock()
					attempts++
					if r.Outcome != netlab.OK || r.Pod != pod {
						failures = append(failures, fmt.Sprintf("%s %s: %v", ipv(fam), proto, r))
					}
					mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond) // pacing
			}
		}()
	}
	p := c.procs[n1]
	if err := p.Restart(); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	p.WaitOutput(t, c.backend.SyncedLine(), firstSyncTimeout)
	time.Sleep(500 * time.Millisecond) // traffic after the first sync, too
	close(stop)
	wg.Wait()
	t.Logf("%d connections and datagrams during the restart, %d failed", attempts, len(failures))
	if len(failures) > 0 {
		t.Errorf("%d of %d attempts failed during the restart, e.g.:\n%s", len(failures), attempts, join(failures[:min(5, len(failures))]))
	}
	for fam, s := range streams {
		if r := s.Ping(answerTimeout); r.Outcome != netlab.OK || r.Pod != pod {
			t.Errorf("%s: connection opened before the restart: %v", ipv(fam), r)
		}
	}
}

// TestMasqueradeAll: with --masquerade-all, even pods' traffic to a service
// is masqueraded, to the node's address towards the endpoint.
func TestMasqueradeAll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b netlab.Backend) {
		var web *corev1.Service
		cfg := defaultConfig()
		cfg.MasqueradeAll = true
		c := startCluster(t, b, cfg, func(l *netlab.Lab, s *netlab.State) {
			web = s.AddService("web", netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort))
			s.SetEndpoints(web, netlab.Ready(l.Pod("pod-c"))...)
		})
		podA, n1 := c.pod("pod-a"), c.node("node-1")
		unmasqueraded := differs(t, b, "masquerade-all")
		for _, fam := range families {
			for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
				r := netlab.Eventually(t, settle, prober(&podA.Host, proto, netlab.ClusterIP(web, fam, 80)), netlab.Answered("pod-c"))
				if unmasqueraded {
					if r.Peer.Addr() != podA.Addr(fam) {
						t.Errorf("%s %s: pod-c saw %s; want pod-a's own address %s", ipv(fam), proto, r.Peer, podA.Addr(fam))
					}
					continue
				}
				if r.Peer.Addr() != n1.Addr(fam) {
					t.Errorf("%s %s: pod-c saw %s; want node-1's address %s", ipv(fam), proto, r.Peer, n1.Addr(fam))
				}
			}
		}
	})
}

// TestNodePortAddresses: node ports answer on the addresses
// --nodeport-addresses selects. Every address of the node (0.0.0.0/0, ::/0)
// includes the pod bridge's; the node network's CIDRs and "primary" do not.
// (Its default differs between kube-proxy's modes: primary for nftables,
// every address for iptables; so each case sets it.)
func TestNodePortAddresses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b netlab.Backend) {
		for _, tc := range []struct {
			name      string
			addresses []string
			bridge    bool // the node port answers on the bridge address
		}{
			{"all", []string{"0.0.0.0/0", "::/0"}, true},
			{"node-network", []string{"192.168.77.0/24", "fd00:77::/64"}, false},
			{"primary", []string{"primary"}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var np *corev1.Service
				cfg := defaultConfig()
				cfg.NodePortAddresses = tc.addresses
				c := startCluster(t, b, cfg, func(l *netlab.Lab, s *netlab.State) {
					np = s.AddService("np", netlab.TCPPort("tcp", 80, targetPort))
					nodePorts(np, npCluster)
					s.SetEndpoints(np, netlab.Ready(l.Pod("pod-c"))...)
				})
				n1, podB := c.node("node-1"), c.pod("pod-b")
				for _, fam := range families {
					netlab.Eventually(t, settle, prober(c.lab.External, netlab.TCP, netip.AddrPortFrom(n1.Addr(fam), npCluster)), netlab.Answered("pod-c"))
					bridge := netip.AddrPortFrom(gateway(n1, fam), npCluster)
					if tc.bridge {
						expectOnly(t, 3, prober(&podB.Host, netlab.TCP, bridge), netlab.OK, "pod-c")
						continue
					}
					for range 3 {
						if r := podB.Dial(netlab.TCP, bridge, dropTimeout); r.Outcome == netlab.OK {
							t.Fatalf("%s: node port on the bridge address %s answered: %v", ipv(fam), bridge, r)
						}
					}
				}
			})
		}
	})
}

// TestRepair damages the rules of node-1's proxy behind its back, as an
// admin or another tool might (everything wiped, one chain flushed, one rule
// deleted), and checks that the proxy repairs them. The proxy is paused
// (SIGSTOP) while the damage is done, so that the test can see the damage
// in place before the proxy may react; its periodic sync is a minute away,
// so a repair within seconds is the kernel's notification at work (kpng's
// backends; upstream kube-proxy, run as a reference, and the backends
// whose dataplane sends no notification, to-ebpf's maps and to-ipvs's
// IPVS and ipsets, get their periodic sync at 2 s instead and the time
// they need).
func TestRepair(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b netlab.Backend) {
		var web *corev1.Service
		cfg := defaultConfig()
		cfg.SyncPeriod = time.Minute
		within := 10 * time.Second // far below the periodic sync
		periodic := differs(t, b, "repair")
		if strings.HasPrefix(b.Name(), "kube-proxy-") || periodic {
			cfg.SyncPeriod = 2 * time.Second
			within = 3*cfg.SyncPeriod + settle
		}
		maps := periodic && strings.TrimPrefix(b.Name(), "kube-") == "ebpf"
		c := startCluster(t, b, cfg, func(l *netlab.Lab, s *netlab.State) {
			web = s.AddService("web", netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort))
			s.SetEndpoints(web, netlab.Ready(l.Pod("pod-c"))...)
		})
		podA, n1 := c.pod("pod-a"), c.node("node-1")
		answers := func(within time.Duration) {
			t.Helper()
			for _, fam := range families {
				for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
					netlab.Eventually(t, within, prober(&podA.Host, proto, netlab.ClusterIP(web, fam, 80)), netlab.Answered("pod-c"))
				}
			}
		}
		answers(settle)
		proc := c.procs[n1]
		if maps {
			repairMaps(t, n1, proc, dialer(&podA.Host, netlab.TCP, netlab.ClusterIP(web, 4, 80), dropTimeout), answers, within)
			return
		}
		// What is damaged: the firewall's rules, counted; to-ipvs's
		// whole dataplane, line by line (repair_ipvs_test.go).
		look := firewallRules
		if isIPVS(b.Name()) {
			look = ipvsDataplane
		}
		// Handshakes begun during a damage: their tuple is reused after
		// the repair (see staleHandshakes); counted over every damage.
		begun := 0
		defer func() {
			if begun == 0 && !t.Failed() && !isIPVS(b.Name()) {
				t.Error("no damage left a handshake unanswered: the check that a repaired proxy NATs a reused tuple did not run")
			}
		}()
		for i, dmg := range damages(b.Name()) {
			t.Run(dmg.name, func(t *testing.T) {
				before := look(t, n1)
				mark := proc.Mark()
				if err := syscall.Kill(proc.Pid(), syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				stopped := true
				defer func() {
					if stopped {
						syscall.Kill(proc.Pid(), syscall.SIGCONT)
					}
				}()
				for _, argv := range dmg.argv {
					if out, err := n1.Run(argv...); err != nil {
						t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
					}
				}
				switch after := look(t, n1); {
				case isIPVS(b.Name()) && sameLines(before, after):
					t.Fatalf("the damage changed nothing: %d lines before and after", len(before))
				case !isIPVS(b.Name()) && len(after) >= len(before):
					t.Fatalf("the damage removed no rule: %d rules before, %d after", len(before), len(after))
				}
				var stale []staleHandshake
				if !isIPVS(b.Name()) {
					stale = staleHandshakes(t, &podA.Host, web, uint16(20000+10*i))
					begun += len(stale)
				}
				resumed, start := proc.Mark(), time.Now()
				if err := syscall.Kill(proc.Pid(), syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				stopped = false
				if isIPVS(b.Name()) {
					// Looked at after each sync of the proxy, not polled:
					// a look at to-ipvs's dataplane takes seconds in the
					// emulated VM.
					took := awaitIPVSRepair(t, n1, proc, resumed, start, before, within)
					t.Logf("resumed the proxy at %s; repaired by the sync that ended after %v of its running time", start.Format("15:04:05.000"), took.Round(time.Millisecond))
					logRepair(t, proc.Output()[mark:])
					answers(settle)
					return
				}
				// Every rule is back (polling the kernel, which has no
				// event to wait on here), and traffic flows.
				deadline := time.Now().Add(within)
				for {
					after := look(t, n1)
					if len(after) == len(before) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d rules before the damage, %d after the repair", len(before), len(after))
					}
					time.Sleep(20 * time.Millisecond)
				}
				t.Logf("repaired within %v", time.Since(start).Round(time.Millisecond))
				answers(settle)
				for _, h := range stale {
					dial := func() netlab.Result { return podA.DialFrom(netlab.TCP, h.port, h.dst, netlab.DefaultTimeout) }
					if strings.HasPrefix(b.Name(), "kube-proxy-") {
						// It cleans UDP flows only: recorded, not required.
						t.Logf("the tuple from port %d reused after the repair: %v", h.port, dial())
						continue
					}
					netlab.Eventually(t, settle, dial, netlab.Answered("pod-c"))
				}
			})
		}
	})
}

// staleHandshake is a TCP connect from a fixed source port that got no
// answer while the proxy's rules were damaged.
type staleHandshake struct {
	port uint16
	dst  netip.AddrPort
}

// staleHandshakes connects from h to web's cluster IP, in each family, from
// source ports port, port+1, while the rules are damaged and the proxy
// stopped, and returns those that got no answer: their SYN was not NATed
// and went on unanswered, leaving a conntrack entry that was never NATed.
// After the repair a client reusing the tuple must be NATed again, which
// needs that entry gone (the proxy's cleanup after a full sync): otherwise
// the reused tuple goes unanswered for the entry's two minutes.
func staleHandshakes(t *testing.T, h *netlab.Host, web *corev1.Service, port uint16) []staleHandshake {
	t.Helper()
	var out []staleHandshake
	for i, fam := range families {
		dst := netlab.ClusterIP(web, fam, 80)
		r := h.DialFrom(netlab.TCP, port+uint16(i), dst, dropTimeout)
		t.Logf("during the damage, from port %d: %v", port+uint16(i), r)
		if r.Outcome == netlab.TimedOut {
			out = append(out, staleHandshake{port + uint16(i), dst})
		}
	}
	return out
}

type damage struct {
	name string
	argv [][]string
}

// damages returns what TestRepair does to the rules of backend name.
func damages(name string) []damage {
	wipe := damage{name: "everything-wiped", argv: [][]string{{"nft", "flush", "ruleset"}}}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "filter", "mangle"} {
			for _, op := range []string{"-F", "-X"} {
				wipe.argv = append(wipe.argv, []string{cmd, "-w", "5", "-t", table, op})
			}
		}
	}
	switch {
	case isIPVS(name):
		return ipvsDamages(wipe)
	case strings.Contains(name, "iptables"):
		chain := "KPNG-SERVICES"
		if strings.HasPrefix(name, "kube-proxy-") {
			chain = "KUBE-SERVICES"
		}
		return []damage{
			wipe,
			{name: "nat-table-flushed", argv: [][]string{{"iptables", "-w", "5", "-t", "nat", "-F"}, {"ip6tables", "-w", "5", "-t", "nat", "-F"}}},
			{name: "chain-flushed", argv: [][]string{{"iptables", "-w", "5", "-t", "nat", "-F", chain}}},
			{name: "jump-deleted", argv: [][]string{{"ip6tables", "-w", "5", "-t", "nat", "-D", "PREROUTING", "1"}, {"ip6tables", "-w", "5", "-t", "nat", "-D", "OUTPUT", "1"}}},
		}
	default:
		table := "kpng"
		if strings.HasPrefix(name, "kube-proxy-") {
			table = "kube-proxy"
		}
		return []damage{
			wipe,
			{name: "table-deleted", argv: [][]string{{"nft", "delete", "table", "ip", table}}},
			{name: "chain-flushed", argv: [][]string{{"nft", "flush", "chain", "ip6", table, "services"}}},
			{name: "rule-deleted", argv: [][]string{{"sh", "-c", "nft delete rule ip " + table + " nat-prerouting handle " +
				"$(nft -a list chain ip " + table + " nat-prerouting | grep -o 'handle [0-9]*' | tail -n 1 | cut -d ' ' -f 2)"}}},
		}
	}
}

// gateway is node n's pod-bridge address of family fam.
func gateway(n *netlab.Node, fam int) netip.Addr {
	if fam == 6 {
		return n.GatewayV6
	}
	return n.GatewayV4
}

func nth(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}

func join(lines []string) string {
	s := ""
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	return s
}

// waitUsable waits until addr, just added to h, is no longer tentative, so
// that the kernel may pick it as a source address.
func waitUsable(t *testing.T, h *netlab.Host, addr netip.Addr) {
	t.Helper()
	if addr.Is4() {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := h.Run("ip", "-6", "-o", "addr", "show", "to", addr.String()+"/128")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, addr.String()) && !strings.Contains(out, "tentative") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: still not usable after 10s: %q", addr, h.Name, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
