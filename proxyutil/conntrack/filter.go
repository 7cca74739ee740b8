package conntrack

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
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
//
// A filter made by [Filter.WithHandshakes] also matches TCP handshakes that
// were never NATed; see there.
type Filter struct {
	family localv1.IPFamily
	sctp   bool
	// service IP:port and node port (address left zero) targets, by
	// protocol, with the serving endpoints their flows may reply from
	services  map[target]*epSet
	nodePorts map[target]*epSet
	// what each entry put in the maps, to take it out again
	owned map[backend.ServiceKey][]owned
	// handshakes, if not nil, are the TCP service targets with a serving
	// endpoint (node ports with the address left zero): see WithHandshakes.
	handshakes map[target]bool
}

type epSet struct{ eps map[netip.AddrPort]bool }

type owned struct {
	nodePort bool
	t        target
	set      *epSet
}

// NewFilter builds the filter for family from state. With sctp, SCTP
// service ports are handled as UDP ones (kube-proxy 1.36 handles UDP only).
func NewFilter(state *backend.State, family localv1.IPFamily, sctp bool) *Filter {
	f := &Filter{family: family, sctp: sctp, services: map[target]*epSet{}, nodePorts: map[target]*epSet{}, owned: map[backend.ServiceKey][]owned{}}
	for k, se := range state.Services {
		f.set(k, se)
	}
	return f
}

// Update follows the changes of a sync: work proportional to the entries
// changed, or a rebuild on a Reset.
func (f *Filter) Update(state *backend.State, ch backend.Changes) {
	if ch.Reset {
		*f = *NewFilter(state, f.family, f.sctp)
		return
	}
	for _, k := range ch.Deleted {
		f.remove(k)
	}
	for _, k := range ch.Set {
		if se := state.Services[k]; se != nil {
			f.set(k, se)
		} else {
			f.remove(k)
		}
	}
}

func (f *Filter) remove(k backend.ServiceKey) {
	for _, o := range f.owned[k] {
		m := f.services
		if o.nodePort {
			m = f.nodePorts
		}
		if m[o.t] == o.set { // not taken over by another entry since
			delete(m, o.t)
		}
	}
	delete(f.owned, k)
}

func (f *Filter) set(k backend.ServiceKey, se *localv1.ServiceEndpoints) {
	f.remove(k)
	if k.Family != f.family {
		return
	}
	var mine []owned
	svc := se.Service
	for _, p := range svc.Ports {
		var proto uint8
		switch {
		case p.Protocol == localv1.Protocol_UDP:
			proto = unix.IPPROTO_UDP
		case p.Protocol == localv1.Protocol_SCTP && f.sctp:
			proto = unix.IPPROTO_SCTP
		default:
			continue
		}
		set := &epSet{eps: map[netip.AddrPort]bool{}}
		for _, ep := range se.Endpoints {
			if ep.PortName != p.Name || ep.Protocol != p.Protocol || !(ep.Serving || ep.Ready) {
				continue
			}
			if ip, err := netip.ParseAddr(ep.Ip); err == nil {
				set.eps[netip.AddrPortFrom(ip.Unmap(), uint16(ep.Port))] = true
			}
		}
		if len(set.eps) == 0 {
			continue
		}
		eachTarget(svc, p, proto, func(t target, nodePort bool) {
			if nodePort {
				f.nodePorts[t] = set
			} else {
				f.services[t] = set
			}
			mine = append(mine, owned{nodePort: nodePort, t: t, set: set})
		})
	}
	if len(mine) > 0 {
		f.owned[k] = mine
	}
}

// WithHandshakes returns f (sharing its maps, so f must not change while
// the result is used) that also matches, for state's TCP service ports
// with a serving endpoint, the flows never NATed whose handshake is still
// unanswered (conntrack state SYN_SENT, reply source the original
// destination). Such a flow began while the rules of its service were
// missing: before a repair put them back, before the first sync over an
// absent table, during a refused transaction. NAT is decided on a flow's
// first packet only, so a client that reuses the flow's tuple (a SYN sent
// again, or a new socket that drew the same source port) meets the entry
// and is not NATed: its connection cannot succeed until the entry expires,
// two minutes later. Established flows are kept: something answered them.
//
// A cleanup after a full sync (one that may have put missing rules back)
// uses it; building it is one pass over state.
func (f *Filter) WithHandshakes(state *backend.State) *Filter {
	g := *f
	g.handshakes = map[target]bool{}
	for k, se := range state.Services {
		if k.Family != f.family {
			continue
		}
		svc := se.Service
		for _, p := range svc.Ports {
			if p.Protocol != localv1.Protocol_TCP || !serving(se.Endpoints, p) {
				continue
			}
			eachTarget(svc, p, unix.IPPROTO_TCP, func(t target, _ bool) { g.handshakes[t] = true })
		}
	}
	return &g
}

// eachTarget calls fn with each destination of svc's port p for proto:
// its cluster IP, external and load-balancer IPs, and its node port (with
// nodePort set, and the address left zero: node ports answer on many).
func eachTarget(svc *localv1.Service, p *localv1.ServicePort, proto uint8, fn func(t target, nodePort bool)) {
	add := func(ip string) {
		if a, err := netip.ParseAddr(ip); err == nil {
			fn(target{proto, netip.AddrPortFrom(a.Unmap(), uint16(p.Port))}, false)
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
		fn(target{proto, netip.AddrPortFrom(netip.Addr{}, uint16(p.NodePort))}, true)
	}
}

// serving reports whether an endpoint of eps serves port p.
func serving(eps []*localv1.Endpoint, p *localv1.ServicePort) bool {
	for _, ep := range eps {
		if ep.PortName == p.Name && ep.Protocol == p.Protocol && (ep.Serving || ep.Ready) {
			return true
		}
	}
	return false
}

// Empty reports whether no flow can match: the cleanup can skip listing
// the table.
func (f *Filter) Empty() bool {
	return len(f.services) == 0 && len(f.nodePorts) == 0 && len(f.handshakes) == 0
}

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
	if proto == unix.IPPROTO_TCP {
		return f.handshakes != nil && replySrc == dst && synSent(flow) &&
			(f.handshakes[target{proto, dst}] || f.handshakes[target{proto, netip.AddrPortFrom(netip.Addr{}, dst.Port())}])
	}
	if set, ok := f.services[target{proto, dst}]; ok && !set.eps[replySrc] {
		return true
	}
	if set, ok := f.nodePorts[target{proto, netip.AddrPortFrom(netip.Addr{}, dst.Port())}]; ok && !set.eps[replySrc] {
		return true
	}
	return false
}

// synSent reports whether flow is a TCP handshake with no answer yet.
func synSent(flow *netlink.ConntrackFlow) bool {
	tcp, ok := flow.ProtoInfo.(*netlink.ProtoInfoTCP)
	return ok && tcp.State == nl.TCP_CONNTRACK_SYN_SENT
}

func addrPort(ip net.IP, port uint16) (netip.AddrPort, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Unmap(), port), true
}
