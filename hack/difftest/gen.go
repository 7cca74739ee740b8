package main

import (
	"fmt"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Cluster is one random cluster: the objects kube-proxy and kpng both read,
// as the API server would serve them, and the feature gates in effect.
type Cluster struct {
	Nodes    []*corev1.Node
	Services []*corev1.Service
	Slices   []*discoveryv1.EndpointSlice
	Gates    Gates
}

// Gates are the kube-proxy 1.36 feature gates that change a decision and
// can be set (the others that matter are locked to their default; see
// gates.go).
type Gates struct {
	// AllowServiceExternalIPs off: no rules for spec.externalIPs.
	NoExternalIPs bool
}

// missingNode is a node name that has no Node object: a proxy whose Node
// is not (yet) known still computes a view, without a zone.
const missingNode = "node-missing"

// ViewNodes are the nodes whose views are compared: every Node, and one
// without a Node object.
func (c *Cluster) ViewNodes() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Name)
	}
	return append(out, missingNode)
}

// DeepCopy copies the cluster.
func (c *Cluster) DeepCopy() *Cluster {
	out := &Cluster{Gates: c.Gates}
	for _, n := range c.Nodes {
		out.Nodes = append(out.Nodes, n.DeepCopy())
	}
	for _, s := range c.Services {
		out.Services = append(out.Services, s.DeepCopy())
	}
	for _, s := range c.Slices {
		out.Slices = append(out.Slices, s.DeepCopy())
	}
	return out
}

// gen draws random objects. Values come from small pools so that
// collisions the rules care about (the same address in two slices, an
// endpoint on this node, a hint for this zone) happen often.
type gen struct {
	r     *rand.Rand
	nodes []string // names endpoints may name: the Nodes, a missing one, none
	next  int      // a counter for unique names and numbers
}

var (
	zones       = []string{"zone-a", "zone-b", "zone-c"}
	portNames   = []string{"http", "dns", "metrics"}
	protocols   = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	namespaces  = []string{"default", "prod"}
	proxyLabels = []*string{nil, nil, nil, nil, nil, nil, nil, nil, ptr.To(""), ptr.To("other-proxy")}
)

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func pick[T any](g *gen, from []T) T { return from[g.r.IntN(len(from))] }

// cluster draws a whole cluster.
func (g *gen) cluster() *Cluster {
	c := &Cluster{Gates: Gates{NoExternalIPs: g.chance(0.2)}}
	for i := range 1 + g.r.IntN(4) {
		c.Nodes = append(c.Nodes, g.node(fmt.Sprintf("node-%d", i+1)))
	}
	g.nodes = []string{missingNode}
	for _, n := range c.Nodes {
		g.nodes = append(g.nodes, n.Name)
	}
	for i := range 1 + g.r.IntN(6) {
		svc := g.service(pick(g, namespaces), fmt.Sprintf("svc-%d", i+1))
		c.Services = append(c.Services, svc)
		c.Slices = append(c.Slices, g.slicesFor(svc)...)
	}
	if g.chance(0.1) {
		// Endpoints of a Service that does not exist (yet).
		orphan := g.service("default", "gone")
		c.Slices = append(c.Slices, g.slicesFor(orphan)...)
	}
	return c
}

func (g *gen) node(name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if g.chance(0.75) {
		n.Labels = map[string]string{corev1.LabelTopologyZone: pick(g, zones)}
	}
	g.next++
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.0.%d", g.next%250+1)}}
	n.Spec.PodCIDRs = []string{fmt.Sprintf("10.244.%d.0/24", g.next%250)}
	return n
}

// families returns a Service's IP families in order.
func (g *gen) families() []corev1.IPFamily {
	switch g.r.IntN(8) {
	case 0, 1, 2:
		return []corev1.IPFamily{corev1.IPv4Protocol}
	case 3, 4:
		return []corev1.IPFamily{corev1.IPv6Protocol}
	case 5, 6:
		return []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	return []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
}

func (g *gen) ip(family corev1.IPFamily, v4, v6 string, n int) string {
	if family == corev1.IPv6Protocol {
		return fmt.Sprintf(v6, n)
	}
	return fmt.Sprintf(v4, n)
}

func otherFamily(f corev1.IPFamily) corev1.IPFamily {
	if f == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// service draws a Service as the API server would store it: defaulted,
// and valid.
func (g *gen) service(ns, name string) *corev1.Service {
	g.next++
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	svc.Spec.Type = pick(g, []corev1.ServiceType{
		corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP,
		corev1.ServiceTypeNodePort, corev1.ServiceTypeNodePort,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeLoadBalancer,
		corev1.ServiceTypeExternalName,
	})
	families := g.families()
	svc.Spec.IPFamilies = families
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	if len(families) == 2 {
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	}
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		svc.Spec.ExternalName = "example.com"
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil
	case svc.Spec.Type == corev1.ServiceTypeClusterIP && g.chance(0.12):
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	default:
		for _, f := range families {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, g.ip(f, "10.96.0.%d", "fd00:10:96::%x", g.next%250+1))
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}

	nPorts := 1 + g.r.IntN(3)
	names := slices.Clone(portNames)
	g.r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	for i := range nPorts {
		p := corev1.ServicePort{
			Name:     names[i],
			Protocol: pick(g, protocols),
			Port:     int32(80 + i),
		}
		if nPorts == 1 && g.chance(0.5) {
			p.Name = "" // a single port may be unnamed
		}
		p.TargetPort.IntVal = 8080
		if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			p.NodePort = int32(30000 + g.next%2000 + i)
			if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && g.chance(0.15) {
				p.NodePort = 0 // allocateLoadBalancerNodePorts: false
			}
		}
		svc.Spec.Ports = append(svc.Spec.Ports, p)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return svc
	}

	if g.chance(0.25) {
		for range 1 + g.r.IntN(2) {
			f := pick(g, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol})
			svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, g.ip(f, "192.0.2.%d", "2001:db8::%x", 1+g.r.IntN(4)))
		}
	}
	externallyAccessible := svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.ExternalIPs) > 0
	if externallyAccessible {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		if g.chance(0.45) {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	}
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	if g.chance(0.35) {
		svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	}
	svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	if g.chance(0.3) {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{
			TimeoutSeconds: ptr.To(pick(g, []int32{1, 600, 10800, 86400})),
		}}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			svc.Spec.HealthCheckNodePort = int32(32000 + g.next%700)
		}
		for range g.r.IntN(3) {
			ing := corev1.LoadBalancerIngress{}
			if g.chance(0.15) {
				ing.Hostname = "lb.example.com"
			} else {
				f := pick(g, []corev1.IPFamily{families[0], families[0], otherFamily(families[0])})
				ing.IP = g.ip(f, "198.51.100.%d", "2001:db8:1::%x", 1+g.r.IntN(4))
				ing.IPMode = pick(g, []*corev1.LoadBalancerIPMode{nil, ptr.To(corev1.LoadBalancerIPModeVIP), ptr.To(corev1.LoadBalancerIPModeProxy)})
			}
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
		}
		if g.chance(0.3) {
			for range 1 + g.r.IntN(2) {
				svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges,
					pick(g, []string{"203.0.113.0/24", "10.0.0.0/8", " 192.168.0.0/16", "0.0.0.0/0", "2001:db8:2::/48", "::/0"}))
			}
		}
	}
	svc.Labels = g.labels()
	return svc
}

// labels draws the proxy-relevant labels: service-proxy-name and
// headless, each absent, empty or set.
func (g *gen) labels() map[string]string {
	l := map[string]string{}
	if v := pick(g, proxyLabels); v != nil {
		l["service.kubernetes.io/service-proxy-name"] = *v
	}
	if g.chance(0.12) {
		l[corev1.IsHeadlessService] = pick(g, []string{"", "true"})
	}
	if len(l) == 0 {
		return nil
	}
	return l
}

// slicesFor draws a Service's EndpointSlices: a few per family it has, now
// and then one of the other family.
func (g *gen) slicesFor(svc *corev1.Service) []*discoveryv1.EndpointSlice {
	families := svc.Spec.IPFamilies
	if len(families) == 0 {
		families = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	if g.chance(0.1) {
		families = append(slices.Clone(families), otherFamily(families[0]))
	}
	var out []*discoveryv1.EndpointSlice
	for _, f := range families {
		for range g.r.IntN(4) {
			out = append(out, g.slice(svc, f))
		}
	}
	if g.chance(0.05) {
		// An FQDN slice, which proxies ignore.
		sl := g.slice(svc, corev1.IPv4Protocol)
		sl.AddressType = discoveryv1.AddressTypeFQDN
		for i := range sl.Endpoints {
			sl.Endpoints[i].Addresses = []string{fmt.Sprintf("pod-%d.example.com", i)}
		}
		out = append(out, sl)
	}
	return out
}

func (g *gen) slice(svc *corev1.Service, family corev1.IPFamily) *discoveryv1.EndpointSlice {
	g.next++
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace,
			Name:      fmt.Sprintf("%s-%05d", svc.Name, g.next),
			Labels:    map[string]string{discoveryv1.LabelServiceName: svc.Name},
		},
		AddressType: discoveryv1.AddressType(family),
	}
	if g.chance(0.08) {
		sl.Labels[corev1.IsHeadlessService] = pick(g, []string{"", "true"})
	}
	for _, p := range svc.Spec.Ports {
		if g.chance(0.12) {
			continue
		}
		ep := discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(int32(8080))}
		switch g.r.IntN(25) {
		case 0:
			ep.Protocol = ptr.To(pick(g, protocols)) // a port the Service may not have
		case 1:
			ep.Port = nil // invalid: ignored
		case 2:
			ep.Name = nil // invalid: ignored
		}
		sl.Ports = append(sl.Ports, ep)
	}
	for range g.r.IntN(5) {
		sl.Endpoints = append(sl.Endpoints, g.endpoint(family))
	}
	if g.chance(0.3) {
		// Hints as the EndpointSlice controller writes them for
		// trafficDistribution: every endpoint hinted for its own zone, and
		// for PreferSameNode its own node, so that topology applies.
		sameNode := g.chance(0.5)
		for i := range sl.Endpoints {
			e := &sl.Endpoints[i]
			e.Hints = nil
			if e.Zone == nil || e.NodeName == nil {
				continue
			}
			e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: *e.Zone}}}
			if sameNode {
				e.Hints.ForNodes = []discoveryv1.ForNode{{Name: *e.NodeName}}
			}
		}
	}
	return sl
}

func (g *gen) cond() *bool { return pick(g, []*bool{nil, ptr.To(true), ptr.To(true), ptr.To(false)}) }

func (g *gen) endpoint(family corev1.IPFamily) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses: []string{g.ip(family, "10.244.0.%d", "fd00:10:244::%x", 1+g.r.IntN(24))},
	}
	if g.chance(0.05) {
		// Only the first address counts.
		e.Addresses = append(e.Addresses, g.ip(family, "10.244.1.%d", "fd00:10:245::%x", 1+g.r.IntN(24)))
	}
	switch g.r.IntN(4) {
	case 0: // ready
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	case 1: // terminating
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: g.cond(), Terminating: ptr.To(true)}
	default: // any combination, unset conditions included
		e.Conditions = discoveryv1.EndpointConditions{Ready: g.cond(), Serving: g.cond(), Terminating: g.cond()}
	}
	if g.chance(0.85) {
		e.NodeName = ptr.To(pick(g, g.nodes))
	}
	if g.chance(0.6) {
		e.Zone = ptr.To(pick(g, zones))
	}
	if g.chance(0.5) {
		e.Hints = &discoveryv1.EndpointHints{}
		if g.chance(0.7) {
			for _, z := range g.subset(zones) {
				e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
		}
		if g.chance(0.4) {
			for _, n := range g.subset(g.nodes) {
				e.Hints.ForNodes = append(e.Hints.ForNodes, discoveryv1.ForNode{Name: n})
			}
		}
	}
	return e
}

// subset returns one or two distinct elements of from.
func (g *gen) subset(from []string) []string {
	a := pick(g, from)
	if b := pick(g, from); b != a && g.chance(0.3) {
		return []string{a, b}
	}
	return []string{a}
}

// step changes c as the API events between two syncs might: one to three
// changes to Services, EndpointSlices or Nodes. c is not modified.
func (g *gen) step(c *Cluster) *Cluster {
	c = c.DeepCopy()
	for range 1 + g.r.IntN(3) {
		switch g.r.IntN(12) {
		case 0: // a new Service and its slices
			g.next++
			svc := g.service(pick(g, namespaces), fmt.Sprintf("new-%d", g.next))
			c.Services = append(c.Services, svc)
			c.Slices = append(c.Slices, g.slicesFor(svc)...)
		case 1: // a Service deleted; its slices go later, if at all
			if len(c.Services) > 0 {
				i := g.r.IntN(len(c.Services))
				c.Services = slices.Delete(c.Services, i, i+1)
			}
		case 2: // a Service replaced: type, families, policies, labels
			if len(c.Services) > 0 {
				i := g.r.IntN(len(c.Services))
				c.Services[i] = g.service(c.Services[i].Namespace, c.Services[i].Name)
			}
		case 3: // a Service's labels or internal policy change
			if len(c.Services) > 0 {
				svc := c.Services[g.r.IntN(len(c.Services))]
				if g.chance(0.5) {
					svc.Labels = g.labels()
				} else if svc.Spec.InternalTrafficPolicy != nil {
					svc.Spec.InternalTrafficPolicy = ptr.To(pick(g, []corev1.ServiceInternalTrafficPolicy{
						corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}))
				}
			}
		case 4: // a new slice for a Service
			if len(c.Services) > 0 {
				svc := c.Services[g.r.IntN(len(c.Services))]
				f := corev1.IPv4Protocol
				if len(svc.Spec.IPFamilies) > 0 {
					f = pick(g, svc.Spec.IPFamilies)
				}
				c.Slices = append(c.Slices, g.slice(svc, f))
			}
		case 5: // a slice deleted
			if len(c.Slices) > 0 {
				i := g.r.IntN(len(c.Slices))
				c.Slices = slices.Delete(c.Slices, i, i+1)
			}
		case 6, 7: // an endpoint's conditions change (a rollout)
			if sl := g.someSlice(c); sl != nil && len(sl.Endpoints) > 0 {
				e := &sl.Endpoints[g.r.IntN(len(sl.Endpoints))]
				e.Conditions = discoveryv1.EndpointConditions{Ready: g.cond(), Serving: g.cond(), Terminating: g.cond()}
			}
		case 8: // an endpoint added or removed
			if sl := g.someSlice(c); sl != nil {
				if len(sl.Endpoints) > 0 && g.chance(0.5) {
					i := g.r.IntN(len(sl.Endpoints))
					sl.Endpoints = slices.Delete(sl.Endpoints, i, i+1)
				} else {
					f := corev1.IPv4Protocol
					if sl.AddressType == discoveryv1.AddressTypeIPv6 {
						f = corev1.IPv6Protocol
					}
					sl.Endpoints = append(sl.Endpoints, g.endpoint(f))
				}
			}
		case 9: // hints recomputed
			if sl := g.someSlice(c); sl != nil && len(sl.Endpoints) > 0 {
				f := corev1.IPv4Protocol
				if sl.AddressType == discoveryv1.AddressTypeIPv6 {
					f = corev1.IPv6Protocol
				}
				for i := range sl.Endpoints {
					sl.Endpoints[i].Hints = g.endpoint(f).Hints
				}
			}
		case 10: // a Node's zone changes
			if len(c.Nodes) > 0 {
				n := c.Nodes[g.r.IntN(len(c.Nodes))]
				if g.chance(0.2) {
					n.Labels = nil
				} else {
					n.Labels = map[string]string{corev1.LabelTopologyZone: pick(g, zones)}
				}
			}
		case 11: // a Node deleted, or one (re)created
			if len(c.Nodes) > 1 && g.chance(0.5) {
				i := g.r.IntN(len(c.Nodes))
				c.Nodes = slices.Delete(c.Nodes, i, i+1)
			} else {
				for i := 1; i <= 4; i++ {
					name := fmt.Sprintf("node-%d", i)
					if !slices.ContainsFunc(c.Nodes, func(n *corev1.Node) bool { return n.Name == name }) {
						c.Nodes = append(c.Nodes, g.node(name))
						if !slices.Contains(g.nodes, name) {
							g.nodes = append(g.nodes, name)
						}
						break
					}
				}
			}
		}
	}
	return c
}

func (g *gen) someSlice(c *Cluster) *discoveryv1.EndpointSlice {
	if len(c.Slices) == 0 {
		return nil
	}
	return c.Slices[g.r.IntN(len(c.Slices))]
}
