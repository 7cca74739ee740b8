// Package brain turns the cluster state into one node's view of its
// services: the only place in kpng that knows Kubernetes service semantics.
//
// Everything here is a pure function of plain data (globalv1 in, localv1
// out) and mirrors upstream kube-proxy (v1.36): which Services are proxied,
// how EndpointSlices merge into per-port endpoint lists, and how
// CategorizeEndpoints picks the endpoints each kind of traffic may use.
package brain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
)

// Options are the node-level settings that change a node's view.
type Options struct {
	// NodeName is this node; endpoints whose nodeName equals it are local.
	NodeName string
	// ServiceProxyName: Services labelled service.kubernetes.io/service-proxy-name
	// are proxied only when this is set and the label's value equals it.
	// Services without the label are always proxied. Empty (kube-proxy's
	// only mode) proxies exactly the Services without the label, whatever
	// its value: kube-proxy selects "label does not exist", so a label with
	// an empty value is another proxy's too.
	ServiceProxyName string
	// ExternalIPsDisabled is kube-proxy's AllowServiceExternalIPs feature
	// gate turned off: no Service's spec.externalIPs are in the view. As
	// upstream, they still make a Service and its ports externally
	// accessible, which decides the traffic policies.
	ExternalIPsDisabled bool
}

// Node is what the brain reads of this node: its topology zone.
type Node struct {
	Name string
	Zone string
}

// NodeFrom returns the topology facts of a node object; a nil node (not
// known yet) has no zone, which disables zone hints as kube-proxy does.
func NodeFrom(name string, n *globalv1.Node) Node {
	if n == nil {
		return Node{Name: name}
	}
	return Node{Name: name, Zone: n.Zone}
}

// Families lists the IP families in view order.
var Families = []localv1.IPFamily{localv1.IPFamily_IPV4, localv1.IPFamily_IPV6}

// Skipped reports why a Service is not proxied at all, or "" when it is.
func Skipped(svc *globalv1.Service, opts Options) string {
	switch {
	case svc.Type == globalv1.ServiceType_EXTERNAL_NAME:
		return "type ExternalName"
	case len(svc.ClusterIps) == 0 || svc.ClusterIps[0] == "" || svc.ClusterIps[0] == "None":
		return "no cluster IP (headless)"
	case svc.ServiceProxyName != nil && (opts.ServiceProxyName == "" || *svc.ServiceProxyName != opts.ServiceProxyName) &&
		!(mutated("empty-proxy-name-proxied") && *svc.ServiceProxyName == ""):
		return fmt.Sprintf("served by proxy %q", *svc.ServiceProxyName)
	}
	return ""
}

// ServiceView computes the node-local view of one Service: one
// ServiceEndpoints per IP family the Service has a cluster IP in (none when
// the Service is skipped). slices are the Service's EndpointSlices, in any
// order.
func ServiceView(svc *globalv1.Service, slices []*globalv1.EndpointSlice, node Node, opts Options) []*localv1.ServiceEndpoints {
	if svc == nil || Skipped(svc, opts) != "" {
		return nil
	}
	var out []*localv1.ServiceEndpoints
	for _, family := range Families {
		if se := familyView(svc, slices, family, node, opts); se != nil {
			out = append(out, se)
		}
	}
	return out
}

// familyView is what upstream's proxier for one family sees of a Service.
func familyView(svc *globalv1.Service, eps []*globalv1.EndpointSlice, family localv1.IPFamily, node Node, opts Options) *localv1.ServiceEndpoints {
	clusterIP := ""
	for _, ip := range svc.ClusterIps {
		if familyOf(ip) == family {
			clusterIP = ip
			break
		}
	}
	if clusterIP == "" {
		return nil
	}

	s := &localv1.Service{
		Namespace:               svc.Namespace,
		Name:                    svc.Name,
		Family:                  family,
		Type:                    serviceType(svc.Type),
		ClusterIp:               clusterIP,
		ExternalIps:             ofFamily(svc.ExternalIps, family),
		ClientIpAffinitySeconds: svc.ClientIpAffinitySeconds,
	}
	for _, ing := range svc.LoadBalancerIngress {
		// ipMode Proxy: the load balancer sends traffic to the node itself,
		// so capturing the VIP here would break it.
		if (!ing.IpModeProxy || mutated("proxy-mode-ingress-captured")) && familyOf(ing.Ip) == family {
			s.LoadBalancerIps = append(s.LoadBalancerIps, ing.Ip)
		}
	}
	for _, r := range svc.LoadBalancerSourceRanges {
		p, err := netip.ParsePrefix(r)
		if err != nil || familyOf(p.Addr().String()) != family {
			continue
		}
		if p.Bits() == 0 {
			// A zero-length range admits everyone: no filtering at all.
			s.LoadBalancerSourceRanges = nil
			break
		}
		s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, p.String())
	}

	// Policies, exactly as kube-proxy's apiservice helpers: external policy
	// is Local only for a Service that accepts external traffic at all.
	svcExternallyAccessible := svc.Type == globalv1.ServiceType_LOAD_BALANCER ||
		svc.Type == globalv1.ServiceType_NODE_PORT ||
		(svc.Type == globalv1.ServiceType_CLUSTER_IP && len(svc.ExternalIps) > 0)
	externalPolicyLocal := svcExternallyAccessible && svc.ExternalTrafficPolicy == globalv1.TrafficPolicy_LOCAL
	internalPolicyLocal := svc.InternalTrafficPolicy == globalv1.TrafficPolicy_LOCAL
	if externalPolicyLocal {
		s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	}
	if internalPolicyLocal {
		s.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	}
	if svc.Type == globalv1.ServiceType_LOAD_BALANCER && externalPolicyLocal {
		s.HealthCheckNodePort = svc.HealthCheckNodePort
	}

	familyExternalIPs := s.ExternalIps
	if opts.ExternalIPsDisabled && !mutated("external-ips-gate-ignored") {
		s.ExternalIps = nil
	}

	byPort := mergeSlices(eps, family, node)
	view := &localv1.ServiceEndpoints{Service: s}
	for _, p := range svc.Ports {
		lp := &localv1.ServicePort{
			Name:           p.Name,
			Protocol:       localv1.Protocol(p.Protocol),
			Port:           p.Port,
			NodePort:       p.NodePort,
			TargetPort:     p.TargetPort,
			TargetPortName: p.TargetPortName,
		}
		// Per port and family, as upstream's BaseServicePortInfo: the
		// family's external IPs count even when the gate hides them.
		portExternallyAccessible := (p.NodePort != 0 && !mutated("node-port-not-external")) || len(s.LoadBalancerIps) > 0 || len(familyExternalIPs) > 0
		policy := portPolicy{
			usesCluster: !internalPolicyLocal || portExternallyAccessible,
			usesLocal:   internalPolicyLocal || (externalPolicyLocal && portExternallyAccessible),
		}
		eps := byPort[portKey{p.Name, lp.Protocol}]
		lp.HasEndpoints = categorize(eps, policy, node)
		for _, e := range eps {
			if e.InClusterSet || e.InLocalSet {
				view.Endpoints = append(view.Endpoints, e.Endpoint)
			}
		}
		s.Ports = append(s.Ports, lp)
	}
	slices.SortFunc(view.Endpoints, localv1.CompareEndpoints)
	view.TriggerTimeUnixNano = triggerTime(eps, family)
	return view
}

// triggerTime is the newest last-change-trigger-time of the family's slices.
func triggerTime(eps []*globalv1.EndpointSlice, family localv1.IPFamily) int64 {
	addrType := globalv1.AddressType_IPV4
	if family == localv1.IPFamily_IPV6 {
		addrType = globalv1.AddressType_IPV6
	}
	var t int64
	for _, sl := range eps {
		if sl.AddressType == addrType {
			t = max(t, sl.TriggerTimeUnixNano)
		}
	}
	return t
}

type portKey struct {
	name     string
	protocol localv1.Protocol
}

// mergeSlices merges a Service's EndpointSlices of one family into one
// endpoint list per (port name, protocol), keyed as upstream by ip:port.
// When the same ip:port appears twice (an endpoint moving between slices, a
// pod IP reused before the old pod is gone, or one slice listing an address
// twice), a non-terminating entry wins; among equals the slice whose name
// sorts first wins, and within one slice the entry listed first, so the
// result depends on neither event order nor map order (upstream leaves
// this case undefined: its result follows map iteration).
func mergeSlices(eps []*globalv1.EndpointSlice, family localv1.IPFamily, node Node) map[portKey][]endpoint {
	addrType := globalv1.AddressType_IPV4
	if family == localv1.IPFamily_IPV6 {
		addrType = globalv1.AddressType_IPV6
	}
	ordered := make([]*globalv1.EndpointSlice, 0, len(eps))
	for _, sl := range eps {
		if sl.AddressType == addrType && (!sl.HeadlessLabel || mutated("headless-slices-used")) {
			ordered = append(ordered, sl)
		}
	}
	slices.SortFunc(ordered, func(a, b *globalv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })

	type epKey struct {
		ip   string
		port int32
	}
	seen := map[portKey]map[epKey]int{}
	out := map[portKey][]endpoint{}
	for _, sl := range ordered {
		for _, port := range sl.Ports {
			if port.Name == nil || port.Port == 0 {
				continue // upstream ignores unnamed (nil) and zero ports
			}
			pk := portKey{*port.Name, localv1.Protocol(port.Protocol)}
			if seen[pk] == nil {
				seen[pk] = map[epKey]int{}
			}
			for _, e := range sl.Endpoints {
				if len(e.Addresses) == 0 {
					continue
				}
				ep := &localv1.Endpoint{
					PortName:    pk.name,
					Protocol:    pk.protocol,
					Ip:          e.Addresses[0],
					Port:        port.Port,
					NodeName:    e.NodeName,
					Zone:        e.Zone,
					Ready:       e.Ready == nil || *e.Ready,
					Serving:     e.Serving == nil || *e.Serving,
					Terminating: e.Terminating != nil && *e.Terminating,
					OnThisNode:  node.Name != "" && e.NodeName == node.Name,
				}
				entry := endpoint{Endpoint: ep, zoneHints: e.HintZones, nodeHints: e.HintNodes}
				k := epKey{ep.Ip, ep.Port}
				if i, dup := seen[pk][k]; dup {
					if (!ep.Terminating && out[pk][i].Terminating) || (mutated("terminating-duplicate-wins") && ep.Terminating && !out[pk][i].Terminating) {
						out[pk][i] = entry
					}
					continue
				}
				seen[pk][k] = len(out[pk])
				out[pk] = append(out[pk], entry)
			}
		}
	}
	return out
}

func familyOf(ip string) localv1.IPFamily {
	if strings.Contains(ip, ":") {
		return localv1.IPFamily_IPV6
	}
	return localv1.IPFamily_IPV4
}

func ofFamily(ips []string, family localv1.IPFamily) []string {
	var out []string
	for _, ip := range ips {
		if familyOf(ip) == family {
			out = append(out, ip)
		}
	}
	return out
}

func serviceType(t globalv1.ServiceType) localv1.ServiceType {
	switch t {
	case globalv1.ServiceType_NODE_PORT:
		return localv1.ServiceType_NODE_PORT
	case globalv1.ServiceType_LOAD_BALANCER:
		return localv1.ServiceType_LOAD_BALANCER
	}
	return localv1.ServiceType_CLUSTER_IP
}
