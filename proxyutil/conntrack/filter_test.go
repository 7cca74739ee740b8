package conntrack

import (
	"maps"
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

func ep(port, ip string, p int32, serving, ready bool) *localv1.Endpoint {
	proto := localv1.Protocol_UDP
	if port == "tcp" {
		proto = localv1.Protocol_TCP
	}
	if port == "sctp" {
		proto = localv1.Protocol_SCTP
	}
	return &localv1.Endpoint{PortName: port, Protocol: proto, Ip: ip, Port: p, Serving: serving, Ready: ready}
}

// testState: one dual-stack-ish set of services.
//
//	dns (v4): cluster 10.96.0.10, external 192.0.2.50, LB 203.0.113.7
//	  port dns  UDP 53 -> 5353, node port 30053, endpoints 10.1.0.1 (ready), 10.1.0.2 (serving, terminating), 10.1.0.3 (not serving)
//	  port tcp  TCP 53 -> 5353, endpoint 10.1.0.1
//	  port sctp SCTP 9 -> 99, endpoint 10.1.0.1
//	empty (v4): cluster 10.96.0.20, UDP port "dns" 53, no serving endpoint, node port 30054
//	dns6 (v6): cluster fd00::10, UDP 53, endpoint fd01::1:5353
func testState() *backend.State {
	st := backend.NewState("n1")
	v4, v6 := localv1.IPFamily_IPV4, localv1.IPFamily_IPV6
	st.Services[backend.ServiceKey{Namespace: "ns", Name: "dns", Family: v4}] = &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: "dns", Family: v4, ClusterIp: "10.96.0.10",
			ExternalIps: []string{"192.0.2.50"}, LoadBalancerIps: []string{"203.0.113.7"},
			Ports: []*localv1.ServicePort{
				{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53, NodePort: 30053},
				{Name: "tcp", Protocol: localv1.Protocol_TCP, Port: 53, NodePort: 30054},
				{Name: "sctp", Protocol: localv1.Protocol_SCTP, Port: 9},
			}},
		Endpoints: []*localv1.Endpoint{
			ep("dns", "10.1.0.1", 5353, true, true), ep("dns", "10.1.0.2", 5353, true, false), ep("dns", "10.1.0.3", 5353, false, false),
			ep("sctp", "10.1.0.1", 99, true, true), ep("tcp", "10.1.0.1", 5353, true, true),
		},
	}
	st.Services[backend.ServiceKey{Namespace: "ns", Name: "empty", Family: v4}] = &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: "empty", Family: v4, ClusterIp: "10.96.0.20",
			Ports: []*localv1.ServicePort{{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53, NodePort: 30055}}},
		Endpoints: []*localv1.Endpoint{ep("dns", "10.1.0.9", 5353, false, false)},
	}
	st.Services[backend.ServiceKey{Namespace: "ns", Name: "dns6", Family: v6}] = &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: "dns6", Family: v6, ClusterIp: "fd00::10",
			Ports: []*localv1.ServicePort{{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53}}},
		Endpoints: []*localv1.Endpoint{ep("dns", "fd01::1", 5353, true, true)},
	}
	return st
}

func flow(proto uint8, src string, dst string, dport uint16, replySrc string, sport uint16) *netlink.ConntrackFlow {
	f := &netlink.ConntrackFlow{}
	f.Forward = netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(src), SrcPort: 40000, DstIP: net.ParseIP(dst), DstPort: dport}
	f.Reverse = netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc), SrcPort: sport, DstIP: net.ParseIP(src), DstPort: 40000}
	return f
}

func TestFilter(t *testing.T) {
	udp, tcp, sctp := uint8(unix.IPPROTO_UDP), uint8(unix.IPPROTO_TCP), uint8(unix.IPPROTO_SCTP)
	st := testState()
	for _, tc := range []struct {
		name  string
		flow  *netlink.ConntrackFlow
		stale bool
	}{
		{"cluster IP to a ready endpoint is kept", flow(udp, "10.2.0.1", "10.96.0.10", 53, "10.1.0.1", 5353), false},
		{"cluster IP to a serving terminating endpoint is kept", flow(udp, "10.2.0.1", "10.96.0.10", 53, "10.1.0.2", 5353), false},
		{"cluster IP to a non-serving endpoint is stale", flow(udp, "10.2.0.1", "10.96.0.10", 53, "10.1.0.3", 5353), true},
		{"cluster IP to a gone endpoint is stale", flow(udp, "10.2.0.1", "10.96.0.10", 53, "10.1.0.99", 5353), true},
		{"right IP, wrong target port is stale", flow(udp, "10.2.0.1", "10.96.0.10", 53, "10.1.0.1", 5354), true},
		{"external IP to a gone endpoint is stale", flow(udp, "198.51.100.1", "192.0.2.50", 53, "10.1.0.99", 5353), true},
		{"load-balancer IP to a gone endpoint is stale", flow(udp, "198.51.100.1", "203.0.113.7", 53, "10.1.0.99", 5353), true},
		{"load-balancer IP to a ready endpoint is kept", flow(udp, "198.51.100.1", "203.0.113.7", 53, "10.1.0.1", 5353), false},
		{"node port on any address to a gone endpoint is stale", flow(udp, "198.51.100.1", "192.0.2.10", 30053, "10.1.0.99", 5353), true},
		{"node port to a ready endpoint is kept", flow(udp, "198.51.100.1", "192.0.2.10", 30053, "10.1.0.1", 5353), false},
		{"TCP is never touched", flow(tcp, "10.2.0.1", "10.96.0.10", 53, "10.1.0.99", 5353), false},
		{"a TCP node port is never touched", flow(tcp, "10.2.0.1", "192.0.2.10", 30054, "10.1.0.99", 5353), false},
		{"SCTP is not touched by default", flow(sctp, "10.2.0.1", "10.96.0.10", 9, "10.1.0.99", 99), false},
		{"a service port without serving endpoints is left alone", flow(udp, "10.2.0.1", "10.96.0.20", 53, "10.1.0.9", 5353), false},
		{"its node port too", flow(udp, "10.2.0.1", "192.0.2.10", 30055, "10.1.0.9", 5353), false},
		{"an unrelated flow is kept", flow(udp, "10.2.0.1", "10.3.0.1", 53, "10.3.0.1", 53), false},
		{"a service port not in the service is kept", flow(udp, "10.2.0.1", "10.96.0.10", 54, "10.1.0.99", 5353), false},
		{"another family's service is not this filter's", flow(udp, "fd02::1", "fd00::10", 53, "fd01::99", 5353), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFilter(st, localv1.IPFamily_IPV4, false)
			if got := f.MatchConntrackFlow(tc.flow); got != tc.stale {
				t.Errorf("stale = %v, want %v (%s)", got, tc.stale, tc.flow)
			}
		})
	}

	v6 := NewFilter(st, localv1.IPFamily_IPV6, false)
	if !v6.MatchConntrackFlow(flow(udp, "fd02::1", "fd00::10", 53, "fd01::99", 5353)) {
		t.Errorf("IPv6: a flow to a gone endpoint is not stale")
	}
	if v6.MatchConntrackFlow(flow(udp, "fd02::1", "fd00::10", 53, "fd01::1", 5353)) {
		t.Errorf("IPv6: a flow to the endpoint is stale")
	}

	withSCTP := NewFilter(st, localv1.IPFamily_IPV4, true)
	if !withSCTP.MatchConntrackFlow(flow(sctp, "10.2.0.1", "10.96.0.10", 9, "10.1.0.99", 99)) {
		t.Errorf("with SCTP: a flow to a gone endpoint is not stale")
	}
	if withSCTP.MatchConntrackFlow(flow(sctp, "10.2.0.1", "10.96.0.10", 9, "10.1.0.1", 99)) {
		t.Errorf("with SCTP: a flow to the endpoint is stale")
	}
	if withSCTP.MatchConntrackFlow(flow(udp, "10.2.0.1", "10.96.0.10", 9, "10.1.0.99", 99)) {
		t.Errorf("with SCTP: the SCTP port matched a UDP flow")
	}
}

// synSentFlow is flow in TCP state SYN_SENT.
func synSentFlow(src, dst string, dport uint16, replySrc string, sport uint16) *netlink.ConntrackFlow {
	f := flow(unix.IPPROTO_TCP, src, dst, dport, replySrc, sport)
	f.ProtoInfo = &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_SYN_SENT}
	return f
}

func TestFilterHandshakes(t *testing.T) {
	st := testState()
	v4 := localv1.IPFamily_IPV4
	// down: a TCP service whose only endpoint is not serving.
	st.Services[backend.ServiceKey{Namespace: "ns", Name: "down", Family: v4}] = &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: "down", Family: v4, ClusterIp: "10.96.0.30",
			Ports: []*localv1.ServicePort{{Name: "tcp", Protocol: localv1.Protocol_TCP, Port: 80, NodePort: 30080}}},
		Endpoints: []*localv1.Endpoint{ep("tcp", "10.1.0.9", 8080, false, false)},
	}
	established := synSentFlow("10.2.0.1", "10.96.0.10", 53, "10.96.0.10", 53)
	established.ProtoInfo = &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_ESTABLISHED}
	noState := flow(unix.IPPROTO_TCP, "10.2.0.1", "10.96.0.10", 53, "10.96.0.10", 53)
	for _, tc := range []struct {
		name  string
		flow  *netlink.ConntrackFlow
		stale bool
	}{
		{"a handshake to a cluster IP never NATed is stale", synSentFlow("10.2.0.1", "10.96.0.10", 53, "10.96.0.10", 53), true},
		{"to an external IP", synSentFlow("198.51.100.1", "192.0.2.50", 53, "192.0.2.50", 53), true},
		{"to a load-balancer IP", synSentFlow("198.51.100.1", "203.0.113.7", 53, "203.0.113.7", 53), true},
		{"to a node port on any address", synSentFlow("198.51.100.1", "192.0.2.10", 30054, "192.0.2.10", 30054), true},
		{"a NATed handshake is kept", synSentFlow("10.2.0.1", "10.96.0.10", 53, "10.1.0.1", 5353), false},
		{"a NATed handshake to a gone endpoint is kept (TCP ends by itself)", synSentFlow("10.2.0.1", "10.96.0.10", 53, "10.1.0.99", 5353), false},
		{"an established flow never NATed is kept: something answered", established, false},
		{"a flow without TCP state is kept", noState, false},
		{"a service port without serving endpoints is left alone", synSentFlow("10.2.0.1", "10.96.0.30", 80, "10.96.0.30", 80), false},
		{"its node port too", synSentFlow("198.51.100.1", "192.0.2.10", 30080, "192.0.2.10", 30080), false},
		{"a port the service does not have", synSentFlow("10.2.0.1", "10.96.0.10", 54, "10.96.0.10", 54), false},
		{"an unrelated address", synSentFlow("10.2.0.1", "10.3.0.1", 53, "10.3.0.1", 53), false},
		{"UDP is still judged by its endpoints", flow(unix.IPPROTO_UDP, "10.2.0.1", "10.96.0.10", 53, "10.96.0.10", 53), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFilter(st, v4, false)
			if got := f.WithHandshakes(st).MatchConntrackFlow(tc.flow); got != tc.stale {
				t.Errorf("after a full sync: stale = %v, want %v (%s)", got, tc.stale, tc.flow)
			}
			// Other syncs leave TCP alone, and WithHandshakes left f as it was.
			if tc.flow.Forward.Protocol == unix.IPPROTO_TCP && f.MatchConntrackFlow(tc.flow) {
				t.Errorf("without handshakes: a TCP flow is stale (%s)", tc.flow)
			}
		})
	}
	v6 := NewFilter(st, localv1.IPFamily_IPV6, false).WithHandshakes(st)
	if v6.MatchConntrackFlow(synSentFlow("10.2.0.1", "10.96.0.10", 53, "10.96.0.10", 53)) {
		t.Errorf("the IPv6 filter matched an IPv4 service's handshake")
	}
	// A state with only TCP services: nothing for UDP, but the table must
	// still be listed after a full sync.
	tcpOnly := backend.NewState("n1")
	k := backend.ServiceKey{Namespace: "ns", Name: "dns", Family: v4}
	tcpOnly.Services[k] = st.Services[k]
	tcpOnly.Services[k].Service.Ports = tcpOnly.Services[k].Service.Ports[1:2]
	if f := NewFilter(tcpOnly, v4, false); !f.Empty() || f.WithHandshakes(tcpOnly).Empty() {
		t.Errorf("TCP only: Empty() = %v, with handshakes %v; want true, false", f.Empty(), f.WithHandshakes(tcpOnly).Empty())
	}
}

func TestFilterEmpty(t *testing.T) {
	if !NewFilter(backend.NewState("n1"), localv1.IPFamily_IPV4, false).Empty() {
		t.Errorf("no services: not empty")
	}
	if NewFilter(testState(), localv1.IPFamily_IPV4, false).Empty() {
		t.Errorf("UDP services: empty")
	}
}

func TestNeedsCleanup(t *testing.T) {
	st := testState()
	v4, v6 := localv1.IPFamily_IPV4, localv1.IPFamily_IPV6
	dns := backend.ServiceKey{Namespace: "ns", Name: "dns", Family: v4}
	dns6 := backend.ServiceKey{Namespace: "ns", Name: "dns6", Family: v6}
	st.Services[backend.ServiceKey{Namespace: "ns", Name: "web", Family: v4}] = &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: "web", Family: v4, Ports: []*localv1.ServicePort{{Protocol: localv1.Protocol_TCP, Port: 80}}},
	}
	web := backend.ServiceKey{Namespace: "ns", Name: "web", Family: v4}
	for _, tc := range []struct {
		name   string
		family localv1.IPFamily
		ch     backend.Changes
		want   bool
	}{
		{"reset", v4, backend.Changes{Reset: true}, true},
		{"a UDP service changed", v4, backend.Changes{Set: []backend.ServiceKey{web, dns}}, true},
		{"only a TCP service changed", v4, backend.Changes{Set: []backend.ServiceKey{web}}, false},
		{"a UDP service of the other family changed", v4, backend.Changes{Set: []backend.ServiceKey{dns6}}, false},
		{"a deletion", v4, backend.Changes{Deleted: []backend.ServiceKey{dns}}, false},
		{"a periodic resync", v6, backend.Changes{Resync: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NeedsCleanup(tc.family, st, tc.ch, false); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// sameFilter compares two filters' decisions, target by target.
func sameFilter(t *testing.T, got, want *Filter) {
	t.Helper()
	for _, m := range []struct {
		name      string
		got, want map[target]*epSet
	}{{"services", got.services, want.services}, {"node ports", got.nodePorts, want.nodePorts}} {
		if len(m.got) != len(m.want) {
			t.Errorf("%s: %d targets, want %d", m.name, len(m.got), len(m.want))
		}
		for tg, w := range m.want {
			g := m.got[tg]
			if g == nil || !maps.Equal(g.eps, w.eps) {
				t.Errorf("%s %v: endpoints %v, want %v", m.name, tg, g, w.eps)
			}
		}
	}
}

func TestFilterUpdateMatchesRebuild(t *testing.T) {
	v4 := localv1.IPFamily_IPV4
	st := testState()
	f := NewFilter(st, v4, false)
	dns := backend.ServiceKey{Namespace: "ns", Name: "dns", Family: v4}
	empty := backend.ServiceKey{Namespace: "ns", Name: "empty", Family: v4}

	// dns loses its ready endpoint and its external IP; empty gains one.
	d := proto.Clone(st.Services[dns]).(*localv1.ServiceEndpoints)
	d.Service.ExternalIps = nil
	d.Endpoints = d.Endpoints[1:]
	st.Services[dns] = d
	e := proto.Clone(st.Services[empty]).(*localv1.ServiceEndpoints)
	e.Endpoints = []*localv1.Endpoint{ep("dns", "10.1.0.9", 5353, true, true)}
	st.Services[empty] = e
	f.Update(st, backend.Changes{Set: []backend.ServiceKey{dns, empty}})
	sameFilter(t, f, NewFilter(st, v4, false))
	if f.MatchConntrackFlow(flow(unix.IPPROTO_UDP, "10.2.0.1", "192.0.2.50", 53, "10.1.0.99", 5353)) {
		t.Errorf("the removed external IP still matches")
	}
	if !f.MatchConntrackFlow(flow(unix.IPPROTO_UDP, "10.2.0.1", "10.96.0.20", 53, "10.1.0.8", 5353)) {
		t.Errorf("the service that gained an endpoint does not match")
	}

	// Deletion, then a reset.
	delete(st.Services, dns)
	f.Update(st, backend.Changes{Deleted: []backend.ServiceKey{dns}})
	sameFilter(t, f, NewFilter(st, v4, false))
	st.Services[dns] = testState().Services[dns]
	f.Update(st, backend.Changes{Reset: true})
	sameFilter(t, f, NewFilter(st, v4, false))
}
