//go:build e2e

package services

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// TestEndpointChurnBreaksNoTraffic: while one Service's endpoints churn (an
// unready endpoint added and removed over and over, its ready set never
// changing), no probe fails, neither to that Service nor to another
// Service's NodePort. Each probe is a new connection (TCP) or a new socket
// (UDP), as a client's requests are.
func TestEndpointChurnBreaksNoTraffic(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b netlab.Backend) {
		var churn, steady *corev1.Service
		cfg := defaultConfig()
		cfg.SyncPeriod = time.Second
		c := startCluster(t, b, cfg, func(l *netlab.Lab, s *netlab.State) {
			churn = s.AddService("churn", netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort))
			s.SetEndpoints(churn, netlab.Ready(l.Pod("pod-b"), l.Pod("pod-c"))...)
			steady = s.AddService("steady", netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort))
			nodePorts(steady, 30081)
			s.SetEndpoints(steady, netlab.Ready(l.Pod("pod-a"), l.Pod("pod-c"))...)
		})
		podA, n1, ext := c.pod("pod-a"), c.node("node-1"), c.lab.External

		var probes []trafficProbe
		for _, fam := range families {
			for _, proto := range []netlab.Protocol{netlab.TCP, netlab.UDP} {
				probes = append(probes,
					trafficProbe{fmt.Sprintf("%s %s pod-a -> churn ClusterIP", ipv(fam), proto), prober(&podA.Host, proto, netlab.ClusterIP(churn, fam, 80))},
					trafficProbe{fmt.Sprintf("%s %s external -> steady NodePort on node-1", ipv(fam), proto), prober(ext, proto, netip.AddrPortFrom(n1.Addr(fam), 30081))},
				)
			}
		}
		for _, p := range probes {
			netlab.Eventually(t, settle, p.dial, netlab.Answered())
		}

		run := startProbes(probes)

		// The third endpoint (pod-a, not ready) comes and goes ten times a
		// second for 20 s, as the cluster did once a second: its
		// usable endpoints never change, so the node views do not either,
		// but the proxies' periodic syncs (every second here) run in the
		// middle of it. Paced by a ticker: this is load, not a wait.
		changes := 0
		churnTick := time.NewTicker(100 * time.Millisecond)
		deadline := time.After(20 * time.Second)
	churning:
		for {
			select {
			case <-deadline:
				break churning
			case <-churnTick.C:
			}
			eps := netlab.Ready(c.pod("pod-b"), c.pod("pod-c"))
			if changes%2 == 0 {
				eps = append(eps, netlab.Endpoint{Host: &podA.Host, Node: podA.Node})
			}
			c.state.SetEndpoints(churn, eps...)
			// As the EndpointSlice controller does at every update.
			for _, sl := range c.state.Slices {
				if sl.Labels[discoveryv1.LabelServiceName] == churn.Name {
					sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}
				}
			}
			c.state.Write(t)
			changes++
		}
		churnTick.Stop()
		sent, failures := run.stop(t)

		total, failed := 0, 0
		for _, p := range probes {
			total += sent[p.name]
			failed += len(failures[p.name])
			if fs := failures[p.name]; len(fs) > 0 {
				t.Errorf("%s: %d of %d probes failed, first: %v", p.name, len(fs), sent[p.name], fs[0])
			}
		}
		t.Logf("%d changes, %d probes, %d failed", changes, total, failed)
		if total < 10*len(probes) {
			t.Fatalf("only %d probes ran: the churn ended before the probes could say anything", total)
		}
	})
}
