//go:build e2e

package services

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// TestHostNetworkEndpoints: a Service whose endpoint is a host-network
// server of node-2 (its address is node-2's own) is reached through its
// cluster IP from a pod and a node of either node, and through its node
// port from outside via either node: via node-2 the endpoint is local to
// the node that translates, via node-1 it is forwarded to node-2,
// masqueraded.
func TestHostNetworkEndpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b netlab.Backend) {
		var svc *corev1.Service
		c := startCluster(t, b, defaultConfig(), func(l *netlab.Lab, s *netlab.State) {
			svc = s.AddService("host", netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort))
			nodePorts(svc, npCluster)
			n2 := l.Node("node-2")
			s.SetEndpoints(svc, netlab.Endpoint{Host: &n2.Host, Node: n2, Ready: true, Serving: true})
		})
		n1, n2, ext := c.node("node-1"), c.node("node-2"), c.lab.External
		if err := n2.Serve(targetPort); err != nil {
			t.Fatal(err)
		}
		for _, fam := range families {
			for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
				for _, client := range []*netlab.Host{&c.pod("pod-a").Host, &n1.Host, &c.pod("pod-c").Host, &n2.Host} {
					t.Run(fmt.Sprintf("%s/%s/cluster-IP-from-%s", ipv(fam), proto, client.Name), func(t *testing.T) {
						dial := prober(client, proto, netlab.ClusterIP(svc, fam, 80))
						netlab.Eventually(t, settle, dial, netlab.Answered("node-2"))
						expectOnly(t, 5, dial, netlab.OK, "node-2")
					})
				}
				for _, via := range []*netlab.Node{n1, n2} {
					t.Run(fmt.Sprintf("%s/%s/node-port-via-%s", ipv(fam), proto, via.Name), func(t *testing.T) {
						dial := prober(ext, proto, netip.AddrPortFrom(via.Addr(fam), npCluster))
						r := netlab.Eventually(t, settle, dial, netlab.Answered("node-2"))
						expectOnly(t, 5, dial, netlab.OK, "node-2")
						// Forwarded to node-2: masqueraded to node-1's
						// address, or node-2's reply would go straight
						// back to the client, untranslated.
						if via == n1 && r.Peer.Addr() != n1.Addr(fam) {
							t.Errorf("node-2 saw %s; want node-1's address %s", r.Peer, n1.Addr(fam))
						}
					})
				}
			}
		}
	})
}
