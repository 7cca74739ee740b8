package ipvs

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudflare/ipvs"

	"github.com/kpng/kpng/api/localv1"
)

// vsKey identifies a virtual server: an address, a port and a protocol.
type vsKey struct {
	Addr  netip.Addr
	Port  uint16
	Proto ipvs.Protocol
}

func (k vsKey) String() string {
	return strings.ToLower(k.Proto.String()) + "/" + netip.AddrPortFrom(k.Addr, k.Port).String()
}

func (k vsKey) compare(o vsKey) int {
	return cmp.Or(k.Addr.Compare(o.Addr), cmp.Compare(k.Port, o.Port), cmp.Compare(k.Proto, o.Proto))
}

// virtualServer is what a virtual server should be.
type virtualServer struct {
	// Timeout is the persistence of client-IP session affinity, in
	// seconds (0: no affinity).
	Timeout uint32
	// Dests are its real servers, sorted.
	Dests []netip.AddrPort
}

func (v virtualServer) equal(o virtualServer) bool {
	return v.Timeout == o.Timeout && slices.Equal(v.Dests, o.Dests)
}

// setEntry is one member of one of the backend's ipsets.
type setEntry struct {
	Set   string // the set's base name (see sets.go); the family prefix is added when written
	Entry string // as ipset add takes it
}

// rendered is what one Service of one family asks of the node: its
// virtual servers, the addresses bound to kube-ipvs0, the ipset members.
type rendered struct {
	VS      map[vsKey]virtualServer
	Addrs   []netip.Addr
	Entries []setEntry
	// NodePorts: the service has node ports (its virtual servers follow
	// the node's addresses).
	NodePorts bool
}

// renderEnv is what rendering needs beyond the Service: the node's
// addresses that accept node ports.
type renderEnv struct {
	nodePortAddrs []netip.Addr
}

// ipvsProto maps a view protocol to IPVS's, and names it as ipset does.
func ipvsProto(p localv1.Protocol) (ipvs.Protocol, string) {
	switch p {
	case localv1.Protocol_UDP:
		return ipvs.UDP, "udp"
	case localv1.Protocol_SCTP:
		return ipvs.SCTP, "sctp"
	}
	return ipvs.TCP, "tcp"
}

// protoName names an IPVS protocol as ipset does.
func protoName(p ipvs.Protocol) string {
	switch p {
	case ipvs.UDP:
		return "udp"
	case ipvs.SCTP:
		return "sctp"
	}
	return "tcp"
}

// render turns one Service into what the node must hold, the way
// kube-proxy's ipvs mode does: a virtual server for the cluster IP, each
// external IP, each load-balancer IP and each node-port address, per
// port; the cluster IP's real servers are the set of the internal traffic
// policy, the others' the set of the external one (the brain computed
// both). Client-IP affinity is IPVS persistence.
func render(se *localv1.ServiceEndpoints, env renderEnv) *rendered {
	svc := se.Service
	r := &rendered{VS: map[vsKey]virtualServer{}}
	clusterIP, _ := netip.ParseAddr(svc.ClusterIp)
	var externalIPs, lbIPs []netip.Addr
	for _, s := range svc.ExternalIps {
		if a, err := netip.ParseAddr(s); err == nil {
			externalIPs = append(externalIPs, a)
		}
	}
	for _, s := range svc.LoadBalancerIps {
		if a, err := netip.ParseAddr(s); err == nil {
			lbIPs = append(lbIPs, a)
		}
	}
	var sourceRanges []netip.Prefix
	for _, s := range svc.LoadBalancerSourceRanges {
		if p, err := netip.ParsePrefix(s); err == nil {
			sourceRanges = append(sourceRanges, p.Masked())
		}
	}
	externalLocal := svc.ExternalTrafficPolicy == localv1.TrafficPolicy_LOCAL
	internalLocal := svc.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL
	timeout := uint32(max(svc.ClientIpAffinitySeconds, 0))

	entry := func(set, e string) { r.Entries = append(r.Entries, setEntry{Set: set, Entry: e}) }
	ipPort := func(a netip.Addr, proto string, port int32) string {
		return a.String() + "," + proto + ":" + strconv.Itoa(int(port))
	}
	var hasEndpoints bool
	addVS := func(a netip.Addr, port int32, proto ipvs.Protocol, dests []netip.AddrPort) {
		r.VS[vsKey{Addr: a, Port: uint16(port), Proto: proto}] = virtualServer{Timeout: timeout, Dests: dests}
		if hasEndpoints && len(dests) == 0 {
			// Endpoints exist, but none for this traffic (a Local
			// policy without local endpoints): dropped, as the view
			// says; a virtual server without real servers would refuse.
			entry(setDrop, ipPort(a, protoName(proto), port))
		}
	}

	for _, port := range svc.Ports {
		proto, pname := ipvsProto(port.Protocol)
		hasEndpoints = port.HasEndpoints
		var cluster, local []netip.AddrPort
		for _, ep := range se.Endpoints {
			if ep.PortName != port.Name || ep.Protocol != port.Protocol {
				continue
			}
			ip, err := netip.ParseAddr(ep.Ip)
			if err != nil {
				continue
			}
			d := netip.AddrPortFrom(ip, uint16(ep.Port))
			if ep.InClusterSet {
				cluster = append(cluster, d)
			}
			if ep.InLocalSet {
				local = append(local, d)
			}
			if ep.OnThisNode && (ep.InClusterSet || ep.InLocalSet) {
				// A pod reaching itself through its Service: masquerade
				// so that its answer comes back through IPVS.
				entry(setLoopBack, ep.Ip+","+pname+":"+strconv.Itoa(int(ep.Port))+","+ep.Ip)
			}
		}
		slices.SortFunc(cluster, netip.AddrPort.Compare)
		slices.SortFunc(local, netip.AddrPort.Compare)
		internal, external := cluster, cluster
		if internalLocal {
			internal = local
		}
		if externalLocal {
			external = local
		}

		if clusterIP.IsValid() {
			addVS(clusterIP, port.Port, proto, internal)
			entry(setClusterIP, ipPort(clusterIP, pname, port.Port))
		}
		for _, a := range externalIPs {
			addVS(a, port.Port, proto, external)
			if externalLocal {
				entry(setExternalIPLocal, ipPort(a, pname, port.Port))
			} else {
				entry(setExternalIP, ipPort(a, pname, port.Port))
			}
		}
		for _, a := range lbIPs {
			addVS(a, port.Port, proto, external)
			entry(setLoadBalancer, ipPort(a, pname, port.Port))
			if externalLocal {
				entry(setLoadBalancerLocal, ipPort(a, pname, port.Port))
			}
			if len(sourceRanges) > 0 {
				entry(setLoadBalancerFW, ipPort(a, pname, port.Port))
				for _, p := range sourceRanges {
					if p.Addr().Is4() == a.Is4() {
						entry(setLoadBalancerSourceCIDR, ipPort(a, pname, port.Port)+","+p.String())
					}
				}
			}
		}
		if port.NodePort != 0 {
			r.NodePorts = true
			for _, a := range env.nodePortAddrs {
				addVS(a, port.NodePort, proto, external)
			}
			entry(nodePortSet(pname, false), strconv.Itoa(int(port.NodePort)))
			if externalLocal {
				entry(nodePortSet(pname, true), strconv.Itoa(int(port.NodePort)))
			}
		}
	}
	if svc.HealthCheckNodePort != 0 {
		entry(setHealthCheckNodePort, strconv.Itoa(int(svc.HealthCheckNodePort)))
	}

	if clusterIP.IsValid() {
		r.Addrs = append(r.Addrs, clusterIP)
	}
	r.Addrs = append(r.Addrs, externalIPs...)
	r.Addrs = append(r.Addrs, lbIPs...)
	slices.SortFunc(r.Addrs, netip.Addr.Compare)
	r.Addrs = slices.Compact(r.Addrs)
	for _, a := range r.Addrs {
		entry(setIPVSIPs, a.String())
	}
	slices.SortFunc(r.Entries, func(a, b setEntry) int {
		return cmp.Or(strings.Compare(a.Set, b.Set), strings.Compare(a.Entry, b.Entry))
	})
	r.Entries = slices.Compact(r.Entries)
	return r
}
