package main

import (
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/proxy"
)

// kube-proxy's informers filter before pkg/proxy sees anything
// (cmd/kube-proxy/app/server.go): Services with a service-proxy-name label
// (any value) or clusterIP None are never listed, nor EndpointSlices with
// the headless label (any value).
const (
	labelServiceProxyName = "service.kubernetes.io/service-proxy-name"
)

func upstreamListsService(svc *corev1.Service) bool {
	_, named := svc.Labels[labelServiceProxyName]
	return !named && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

// setUpstreamGates sets kube-proxy's process-wide feature gates as g says.
func setUpstreamGates(g Gates) error {
	return utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{
		string(features.AllowServiceExternalIPs): !g.NoExternalIPs,
	})
}

// upstreamServices is kube-proxy's service port map of one family.
func upstreamServices(c *Cluster, family corev1.IPFamily) proxy.ServicePortMap {
	sct := proxy.NewServiceChangeTracker(family, nil, nil)
	for _, svc := range c.Services {
		if upstreamListsService(svc) {
			sct.Update(nil, svc)
		}
	}
	m := proxy.ServicePortMap{}
	m.Update(sct)
	return m
}

// upstreamEndpoints is kube-proxy's endpoints map of one family, on node.
func upstreamEndpoints(c *Cluster, family corev1.IPFamily, node string) proxy.EndpointsMap {
	ect := proxy.NewEndpointsChangeTracker(family, node, nil, nil)
	for _, sl := range c.Slices {
		if _, headless := sl.Labels[corev1.IsHeadlessService]; !headless {
			ect.EndpointSliceUpdate(sl, false)
		}
	}
	m := proxy.EndpointsMap{}
	m.Update(ect)
	return m
}

// Upstream computes each node's decisions with kube-proxy's own code: its
// change trackers, then CategorizeEndpoints for every service port, as
// its proxiers do at every sync. The process's feature gates must already
// be set (setUpstreamGates). nodes are the nodes to compute for; a node
// without a Node object is one whose Node kube-proxy never found.
func Upstream(c *Cluster, nodes []string) map[string]Result {
	out := map[string]Result{}
	for _, node := range nodes {
		out[node] = Result{}
	}
	for _, family := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		services := upstreamServices(c, family)
		for _, node := range nodes {
			var labels map[string]string
			for _, n := range c.Nodes {
				if n.Name == node {
					labels = n.Labels
				}
			}
			eps := upstreamEndpoints(c, family, node)
			for spn, sp := range services {
				clusterEps, localEps, _, hasAny := proxy.CategorizeEndpoints(eps[spn], sp, node, labels)
				k := portKey(familyName(family == corev1.IPv6Protocol), spn.Namespace, spn.Name, spn.Port, string(spn.Protocol))
				out[node][k] = Port{
					Service: serviceFacts(sp.ClusterIP().String(), sp.Port(), sp.NodePort(),
						ipStrings(sp.ExternalIPs()), ipStrings(sp.LoadBalancerVIPs()), netStrings(sp.LoadBalancerSourceRanges()),
						sp.ExternalPolicyLocal(), sp.InternalPolicyLocal(), sp.StickyMaxAgeSeconds(), sp.HealthCheckNodePort()),
					Cluster: upstreamEndpointStrings(clusterEps),
					Local:   upstreamEndpointStrings(localEps),
					HasAny:  hasAny,
				}
			}
		}
	}
	return out
}

func upstreamEndpointStrings(eps []proxy.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, endpointString(e.IP(), e.Port(), e.IsLocal(), e.IsReady(), e.IsServing(), e.IsTerminating()))
	}
	return sortedStrings(out)
}

func ipStrings(ips []net.IP) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func netStrings(nets []*net.IPNet) []string {
	var out []string
	for _, n := range nets {
		out = append(out, n.String())
	}
	return out
}

// checkUpstreamGates fails when the linked kube-proxy code does not see
// the gates as kube-proxy 1.36 runs with them: a test binary whose
// emulated version were off would compare kpng with the wrong rules.
func checkUpstreamGates() error {
	for gate, want := range map[string]bool{
		string(features.PreferSameTrafficDistribution): true,
		string(features.AllowServiceExternalIPs):       true,
	} {
		if got := utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(gate)); got != want {
			return fmt.Errorf("kube-proxy's gate %s is %t here, kube-proxy 1.36 runs with %t", gate, got, want)
		}
	}
	return nil
}
