package conntrack

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

type target struct {
	proto uint8
	addr  netip.AddrPort
}

// Filter decides which conntrack flows of one IP family are stale: flows
// whose original destination is a service IP and port (cluster IP, external
// IPs, load-balancer IPs) or a node port of a UDP service port with serving
// endpoints, and whose reply source is not one of those endpoints. Such a
// flow keeps sending a client's packets to an endpoint that is gone, since
// conntrack keeps using the DNAT it chose, for as long as the client keeps
// talking.
//
// Service ports without any serving endpoint are left alone, as kube-proxy
// does. It implements netlink.CustomConntrackFilter.
type Filter struct {
	services map[target]map[netip.AddrPort]bool
	// node ports, by protocol and port (the address is left zero)
	nodePorts map[target]map[netip.AddrPort]bool
}

// NewFilter builds the filter for family from state. With sctp, SCTP
// service ports are handled as UDP ones (kube-proxy 1.36 handles UDP only).
func NewFilter(state *backend.State, family localv1.IPFamily, sctp bool) *Filter {
	f := &Filter{services: map[target]map[netip.AddrPort]bool{}, nodePorts: map[target]map[netip.AddrPort]bool{}}
	for k, se := range state.Services {
		if k.Family != family {
			continue
		}
		svc := se.Service
		for _, p := range svc.Ports {
			var proto uint8
			switch {
			case p.Protocol == localv1.Protocol_UDP:
				proto = unix.IPPROTO_UDP
			case p.Protocol == localv1.Protocol_SCTP && sctp:
				proto = unix.IPPROTO_SCTP
			default:
				continue
			}
			eps := map[netip.AddrPort]bool{}
			for _, ep := range se.Endpoints {
				if ep.PortName != p.Name || ep.Protocol != p.Protocol || !(ep.Serving || ep.Ready) {
					continue
				}
				if ip, err := netip.ParseAddr(ep.Ip); err == nil {
					eps[netip.AddrPortFrom(ip.Unmap(), uint16(ep.Port))] = true
				}
			}
			if len(eps) == 0 {
				continue
			}
			add := func(ip string) {
				if a, err := netip.ParseAddr(ip); err == nil {
					f.services[target{proto, netip.AddrPortFrom(a.Unmap(), uint16(p.Port))}] = eps
				}
			}
			add(svc.ClusterIp)
			for _, ip := range svc.ExternalIps {
				add(ip)
			}
			for _, ip := range svc.LoadBalancerIps {
				add(ip)
			}
			if p.NodePort != 0 {
				// Any destination address: node ports answer on many.
				f.nodePorts[target{proto, netip.AddrPortFrom(netip.Addr{}, uint16(p.NodePort))}] = eps
			}
		}
	}
	return f
}

// Empty reports whether no flow can match: the cleanup can skip listing
// the table.
func (f *Filter) Empty() bool { return len(f.services) == 0 && len(f.nodePorts) == 0 }

// MatchConntrackFlow reports whether flow is stale.
func (f *Filter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	proto := flow.Forward.Protocol
	dst, ok := addrPort(flow.Forward.DstIP, flow.Forward.DstPort)
	if !ok {
		return false
	}
	replySrc, ok := addrPort(flow.Reverse.SrcIP, flow.Reverse.SrcPort)
	if !ok {
		return false
	}
	if eps, ok := f.services[target{proto, dst}]; ok && !eps[replySrc] {
		return true
	}
	if eps, ok := f.nodePorts[target{proto, netip.AddrPortFrom(netip.Addr{}, dst.Port())}]; ok && !eps[replySrc] {
		return true
	}
	return false
}

func addrPort(ip net.IP, port uint16) (netip.AddrPort, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Unmap(), port), true
}
