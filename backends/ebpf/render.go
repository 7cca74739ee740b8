package ebpf

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// IP protocol numbers, as the kernel's socket carries them.
const (
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

// Frontend is an address a socket may dial to reach a Service: a cluster
// IP, external IP, load-balancer IP or node address, with a port and a
// protocol. It is the key of the services map. Outside frontends are those
// that packets from outside the node are addressed to (read by the tc
// programs); the others are those the node's sockets dial (read by the
// cgroup programs): one address has both, with sets that may differ.
type Frontend struct {
	Addr    netip.Addr
	Port    uint16
	Proto   uint8
	Outside bool
}

func (f Frontend) String() string {
	s := fmt.Sprintf("%s/%s", netip.AddrPortFrom(f.Addr, f.Port), protoName(f.Proto))
	if f.Outside {
		s += " outside"
	}
	return s
}

func protoName(p uint8) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoSCTP:
		return "sctp"
	}
	return fmt.Sprint(p)
}

// Set is a backend set: the endpoints a connection to some frontends may
// go to, in slot order. Empty, it refuses connections (Drop: as if timed
// out, where kube-proxy drops; otherwise refused, where it rejects).
type Set struct {
	Endpoints []netip.AddrPort
	Drop      bool
}

// Equal reports whether two sets hold the same endpoints in the same order.
func (s Set) Equal(o Set) bool {
	return s.Drop == o.Drop && slices.Equal(s.Endpoints, o.Endpoints)
}

// Route is what one frontend leads to: a set of its Service (by name in
// Rendered.Sets) and the Service port's session affinity.
type Route struct {
	Set string
	// AffinitySec is ClientIP affinity's timeout (0: none), and
	// AffinityKey names the Service port the affinity is kept for.
	AffinitySec uint32
	AffinityKey string
	// Masquerade: packets from outside are masqueraded to the node's
	// address (externalTrafficPolicy Cluster).
	Masquerade bool
	// NodePort: an outside frontend on a node address, which the node's
	// stack refuses when the Service has no endpoint.
	NodePort bool
	// SourceRanges: an outside frontend of a load-balancer IP accepts new
	// connections only from these client prefixes (the Service's
	// loadBalancerSourceRanges); none: from anywhere.
	SourceRanges []netip.Prefix
}

// Rendered is one Service of the view as the socket programs see it.
type Rendered struct {
	Frontends map[Frontend]Route
	Sets      map[string]Set
}

// Render turns a Service of the view into frontends and backend sets.
// nodeAddrs are the node's addresses that accept NodePorts (of the
// Service's family).
//
// The socket programs run for processes of this node only, so which set a
// frontend uses follows kube-proxy for traffic that starts on the node:
// cluster IPs use the internal traffic policy's set; external IPs,
// load-balancer IPs and node ports always use the cluster set, as kube-proxy
// short-circuits traffic from the node and its pods to them under the Local
// external policy.
//
// The same addresses (but cluster IPs) are also outside frontends, for the
// tc programs: packets from outside the node use the local set and keep
// their source under externalTrafficPolicy Local, and the cluster set with
// masquerade under Cluster; ClientIP affinity is per client address.
func Render(se *localv1.ServiceEndpoints, nodeAddrs []netip.Addr) (*Rendered, error) {
	svc := se.Service
	key := backend.KeyOf(se)
	r := &Rendered{Frontends: map[Frontend]Route{}, Sets: map[string]Set{}}
	clusterIP, err := parseAddr(svc.ClusterIp)
	if err != nil {
		return nil, fmt.Errorf("service %s: cluster IP: %w", key, err)
	}
	var external []netip.Addr
	for _, s := range append(slices.Clone(svc.ExternalIps), svc.LoadBalancerIps...) {
		a, err := parseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("service %s: external address: %w", key, err)
		}
		external = append(external, a)
	}
	lbIPs := map[netip.Addr]bool{}
	for _, s := range svc.LoadBalancerIps {
		if a, err := parseAddr(s); err == nil {
			lbIPs[a] = true
		}
	}
	ranges, err := sourceRanges(svc.LoadBalancerSourceRanges)
	if err != nil {
		return nil, fmt.Errorf("service %s: loadBalancerSourceRanges: %w", key, err)
	}
	var affinity uint32
	if svc.ClientIpAffinitySeconds > 0 {
		affinity = uint32(svc.ClientIpAffinitySeconds)
	}
	for _, port := range svc.Ports {
		proto, ok := protoNumber(port.Protocol)
		if !ok {
			continue
		}
		base := fmt.Sprintf("%s/%s/%s", key, port.Name, protoName(proto))
		var cluster, local Set
		for _, ep := range se.Endpoints {
			if ep.PortName != port.Name || ep.Protocol != port.Protocol {
				continue
			}
			ip, err := parseAddr(ep.Ip)
			if err != nil {
				return nil, fmt.Errorf("service %s: endpoint: %w", key, err)
			}
			ap := netip.AddrPortFrom(ip, uint16(ep.Port))
			if ep.InClusterSet {
				cluster.Endpoints = append(cluster.Endpoints, ap)
			}
			if ep.InLocalSet {
				local.Endpoints = append(local.Endpoints, ap)
			}
		}
		// has_endpoints: some endpoint is usable from somewhere. An empty
		// set then means "none for this node": kube-proxy drops.
		cluster.Drop = len(cluster.Endpoints) == 0 && port.HasEndpoints
		local.Drop = len(local.Endpoints) == 0 && port.HasEndpoints

		route := func(set string) Route {
			return Route{Set: set, AffinitySec: affinity, AffinityKey: base}
		}
		internal := base + "/cluster"
		r.Sets[internal] = cluster
		if svc.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL {
			internal = base + "/local"
			r.Sets[internal] = local
		}
		outside := Route{Set: base + "/cluster", AffinitySec: affinity, AffinityKey: base, Masquerade: true}
		if svc.ExternalTrafficPolicy == localv1.TrafficPolicy_LOCAL {
			outside.Set, outside.Masquerade = base+"/local", false
			r.Sets[outside.Set] = local
		}
		r.add(Frontend{Addr: clusterIP, Port: uint16(port.Port), Proto: proto}, route(internal))
		for _, a := range external {
			r.add(Frontend{Addr: a, Port: uint16(port.Port), Proto: proto}, route(base+"/cluster"))
			ext := outside
			if lbIPs[a] { // kube-proxy filters the load-balancer IPs only
				ext.SourceRanges = ranges
			}
			r.add(Frontend{Addr: a, Port: uint16(port.Port), Proto: proto, Outside: true}, ext)
		}
		if port.NodePort > 0 {
			for _, a := range nodeAddrs {
				r.add(Frontend{Addr: a, Port: uint16(port.NodePort), Proto: proto}, route(base+"/cluster"))
				np := outside
				np.NodePort = true
				r.add(Frontend{Addr: a, Port: uint16(port.NodePort), Proto: proto, Outside: true}, np)
			}
		}
	}
	return r, nil
}

// sourceRanges parses loadBalancerSourceRanges (canonical CIDRs of the
// Service's family); a range holding every address is no filter (nil).
func sourceRanges(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, err
		}
		if p.Bits() == 0 {
			return nil, nil
		}
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out), nil
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// add adds a frontend; the first route of a frontend wins (a Service
// listing an address twice, as external and load-balancer IP).
func (r *Rendered) add(f Frontend, rt Route) {
	if _, ok := r.Frontends[f]; !ok {
		r.Frontends[f] = rt
	}
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap(), nil
}

func protoNumber(p localv1.Protocol) (uint8, bool) {
	switch p {
	case localv1.Protocol_TCP:
		return protoTCP, true
	case localv1.Protocol_UDP:
		return protoUDP, true
	case localv1.Protocol_SCTP:
		return protoSCTP, true
	}
	return 0, false
}

// NodeAddrs returns the node's addresses of a family that accept NodePorts
// from the node itself: its primary address (the view's first of the
// family), as kube-proxy's default --nodeport-addresses=primary.
func NodeAddrs(node *localv1.Node, fam localv1.IPFamily) []netip.Addr {
	if node == nil {
		return nil
	}
	for _, s := range node.Addresses {
		a, err := parseAddr(s)
		if err != nil {
			continue
		}
		if a.Is4() == (fam == localv1.IPFamily_IPV4) {
			return []netip.Addr{a}
		}
	}
	return nil
}
