package brain

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
)

// Builders keep the cases short: a default Service is ClusterIP 10.96.0.1
// with one TCP port "http" 80 -> 8080 in namespace "ns".

type svcMod func(*globalv1.Service)

func svc(mods ...svcMod) *globalv1.Service {
	s := &globalv1.Service{
		Namespace:  "ns",
		Name:       "web",
		Type:       globalv1.ServiceType_CLUSTER_IP,
		ClusterIps: []string{"10.96.0.1"},
		Ports:      []*globalv1.ServicePort{{Name: "http", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080}},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func clusterIPs(ips ...string) svcMod { return func(s *globalv1.Service) { s.ClusterIps = ips } }
func svcType(t globalv1.ServiceType) svcMod {
	return func(s *globalv1.Service) {
		s.Type = t
		if t == globalv1.ServiceType_NODE_PORT || t == globalv1.ServiceType_LOAD_BALANCER {
			for i, p := range s.Ports {
				p.NodePort = 30080 + int32(i)
			}
		}
	}
}
func itpLocal(s *globalv1.Service)     { s.InternalTrafficPolicy = globalv1.TrafficPolicy_LOCAL }
func etpLocal(s *globalv1.Service)     { s.ExternalTrafficPolicy = globalv1.TrafficPolicy_LOCAL }
func externalIPs(ips ...string) svcMod { return func(s *globalv1.Service) { s.ExternalIps = ips } }
func proxyName(n string) svcMod        { return func(s *globalv1.Service) { s.ServiceProxyName = &n } }
func ports(p ...*globalv1.ServicePort) svcMod {
	return func(s *globalv1.Service) { s.Ports = p }
}

type epMod func(*globalv1.Endpoint)

func ep(ip string, mods ...epMod) *globalv1.Endpoint {
	e := &globalv1.Endpoint{Addresses: []string{ip}, NodeName: "other"}
	for _, m := range mods {
		m(e)
	}
	return e
}

var (
	local       epMod = func(e *globalv1.Endpoint) { e.NodeName = "me" }
	notReady    epMod = func(e *globalv1.Endpoint) { e.Ready = proto.Bool(false) }
	terminating epMod = func(e *globalv1.Endpoint) {
		e.Ready, e.Terminating = proto.Bool(false), proto.Bool(true)
	}
	notServing epMod = func(e *globalv1.Endpoint) { e.Serving = proto.Bool(false) }
)

func zones(z ...string) epMod { return func(e *globalv1.Endpoint) { e.HintZones = z } }
func nodes(n ...string) epMod { return func(e *globalv1.Endpoint) { e.HintNodes = n } }

// slice builds an EndpointSlice for service "web" with one TCP port "http"
// on 8080; the family follows the first endpoint's address.
func slice(name string, eps ...*globalv1.Endpoint) *globalv1.EndpointSlice {
	return slicePorts(name, []*globalv1.EndpointPort{{Name: proto.String("http"), Protocol: globalv1.Protocol_TCP, Port: 8080}}, eps...)
}

func slicePorts(name string, ports []*globalv1.EndpointPort, eps ...*globalv1.Endpoint) *globalv1.EndpointSlice {
	at := globalv1.AddressType_IPV4
	if len(eps) > 0 && strings.Contains(eps[0].Addresses[0], ":") {
		at = globalv1.AddressType_IPV6
	}
	return &globalv1.EndpointSlice{Namespace: "ns", Name: name, ServiceName: "web", AddressType: at, Ports: ports, Endpoints: eps}
}

func port(name string, proto_ globalv1.Protocol, n int32) *globalv1.EndpointPort {
	return &globalv1.EndpointPort{Name: proto.String(name), Protocol: proto_, Port: n}
}

// summary renders a view as one line per service port and family:
// "IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 CL" where C and L mark
// membership of the cluster and local sets ("none" when has_endpoints is false).
func summary(views []*localv1.ServiceEndpoints) []string {
	var out []string
	for _, v := range views {
		for _, p := range v.Service.Ports {
			line := fmt.Sprintf("%s %s/%s", v.Service.Family, p.Name, p.Protocol)
			if !p.HasEndpoints {
				line += " none"
			} else {
				line += " has"
			}
			var eps []string
			for _, e := range v.Endpoints {
				if e.PortName != p.Name || e.Protocol != p.Protocol {
					continue
				}
				marks := ""
				if e.InClusterSet {
					marks += "C"
				}
				if e.InLocalSet {
					marks += "L"
				}
				eps = append(eps, fmt.Sprintf("%s:%d %s", e.Ip, e.Port, marks))
			}
			if len(eps) > 0 {
				line += ": " + strings.Join(eps, ", ")
			}
			out = append(out, line)
		}
	}
	return out
}

func TestServiceView(t *testing.T) {
	me := Node{Name: "me", Zone: "zone-a"}
	cases := []struct {
		name   string
		svc    *globalv1.Service
		slices []*globalv1.EndpointSlice
		node   *Node
		opts   Options
		want   []string
	}{
		// Which Services are proxied.
		{
			name: "ExternalName services are not proxied",
			svc:  svc(svcType(globalv1.ServiceType_EXTERNAL_NAME)),
		},
		{
			name: "headless services (clusterIP None) are not proxied",
			svc:  svc(clusterIPs("None")),
		},
		{
			name: "services without a cluster IP are not proxied",
			svc:  svc(clusterIPs()),
		},
		{
			name: "services labelled with another service-proxy-name are left to that proxy",
			svc:  svc(proxyName("other-proxy")),
		},
		{
			name: "services labelled with an empty service-proxy-name are not ours either",
			svc:  svc(proxyName("")),
			opts: Options{ServiceProxyName: "kpng"},
		},
		{
			name:   "services labelled with our service-proxy-name are proxied",
			svc:    svc(proxyName("kpng")),
			opts:   Options{ServiceProxyName: "kpng"},
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1"))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name: "services labelled with an empty service-proxy-name are another proxy's (kube-proxy selects label absent)",
			svc:  svc(proxyName("")),
		},
		{
			name:   "services labelled with a service-proxy-name are not proxied by a proxy without a name",
			svc:    svc(proxyName("kpng")),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1"))},
		},

		// How EndpointSlices merge.
		{
			name: "no endpoints: the port has none",
			svc:  svc(),
			want: []string{"IPV4 http/TCP none"},
		},
		{
			name:   "endpoints of several slices are merged",
			svc:    svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1")), slice("s2", ep("10.0.0.2"))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name: "EndpointSlices labelled headless are ignored",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1")), func() *globalv1.EndpointSlice {
				s := slice("s2", ep("10.0.0.2"))
				s.HeadlessLabel = true
				return s
			}()},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name: "FQDN slices are ignored",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{func() *globalv1.EndpointSlice {
				s := slice("s1", ep("db.example"))
				s.AddressType = globalv1.AddressType_FQDN
				return s
			}()},
			want: []string{"IPV4 http/TCP none"},
		},
		{
			name: "an address listed twice in one slice: the non-terminating copy wins",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{
				slice("s1", ep("10.0.0.1", terminating), ep("10.0.0.2"), ep("10.0.0.1")),
			},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name: "an address listed twice in one slice with equal conditions: the first copy wins",
			svc:  svc(itpLocal),
			slices: []*globalv1.EndpointSlice{
				slice("s1", ep("10.0.0.1", local), ep("10.0.0.1")),
			},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 L"},
		},
		{
			name: "a duplicate endpoint across slices resolves to the non-terminating one",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{
				slice("a-old", ep("10.0.0.1", terminating), ep("10.0.0.2")),
				slice("b-new", ep("10.0.0.1")),
			},
			// Had the terminating copy won, 10.0.0.1 would not be in the cluster set.
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name:   "missing conditions mean ready and serving, not terminating",
			svc:    svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", &globalv1.Endpoint{Addresses: []string{"10.0.0.1"}})},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name: "named target ports are resolved per slice",
			svc:  svc(ports(&globalv1.ServicePort{Name: "http", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPortName: "web"})),
			slices: []*globalv1.EndpointSlice{
				slicePorts("v1", []*globalv1.EndpointPort{port("http", globalv1.Protocol_TCP, 8080)}, ep("10.0.0.1")),
				slicePorts("v2", []*globalv1.EndpointPort{port("http", globalv1.Protocol_TCP, 9090)}, ep("10.0.0.2")),
			},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:9090 C"},
		},
		{
			name: "TCP and UDP on the same port number are kept apart",
			svc: svc(ports(
				&globalv1.ServicePort{Name: "dns", Protocol: globalv1.Protocol_UDP, Port: 53, TargetPort: 53},
				&globalv1.ServicePort{Name: "dns-tcp", Protocol: globalv1.Protocol_TCP, Port: 53, TargetPort: 53},
			)),
			slices: []*globalv1.EndpointSlice{
				slicePorts("udp", []*globalv1.EndpointPort{port("dns", globalv1.Protocol_UDP, 53)}, ep("10.0.0.1")),
				slicePorts("tcp", []*globalv1.EndpointPort{port("dns-tcp", globalv1.Protocol_TCP, 53)}, ep("10.0.0.2")),
			},
			want: []string{"IPV4 dns/UDP has: 10.0.0.1:53 C", "IPV4 dns-tcp/TCP has: 10.0.0.2:53 C"},
		},
		{
			name: "a slice port matches the service port by name and protocol, not number",
			svc:  svc(ports(&globalv1.ServicePort{Name: "dns", Protocol: globalv1.Protocol_UDP, Port: 53, TargetPort: 53})),
			slices: []*globalv1.EndpointSlice{
				slicePorts("tcp", []*globalv1.EndpointPort{port("dns", globalv1.Protocol_TCP, 53)}, ep("10.0.0.1")),
			},
			want: []string{"IPV4 dns/UDP none"},
		},
		{
			name: "slice ports without a name or with port 0 are ignored",
			svc:  svc(ports(&globalv1.ServicePort{Name: "", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080})),
			slices: []*globalv1.EndpointSlice{
				slicePorts("nil-name", []*globalv1.EndpointPort{{Protocol: globalv1.Protocol_TCP, Port: 8080}}, ep("10.0.0.1")),
				slicePorts("zero", []*globalv1.EndpointPort{port("", globalv1.Protocol_TCP, 0)}, ep("10.0.0.2")),
				slicePorts("ok", []*globalv1.EndpointPort{port("", globalv1.Protocol_TCP, 8080)}, ep("10.0.0.3")),
			},
			want: []string{"IPV4 /TCP has: 10.0.0.3:8080 C"},
		},

		// Readiness and the terminating fallback.
		{
			name:   "not-ready endpoints are not used while others are ready",
			svc:    svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1"), ep("10.0.0.2", notReady))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name:   "terminating endpoints are used when none is ready",
			svc:    svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", terminating), ep("10.0.0.2", notReady))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name:   "terminating endpoints that stopped serving are never used",
			svc:    svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", terminating, notServing))},
			want:   []string{"IPV4 http/TCP none"},
		},
		{
			name:   "serving but not terminating and not ready does not count",
			svc:    svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", notReady))},
			want:   []string{"IPV4 http/TCP none"},
		},
		{
			name:   "ready terminating endpoints are not ready",
			svc:    svc(),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1"), ep("10.0.0.2", terminating))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},

		// Topology.
		{
			name: "zone hints apply when every ready endpoint has them and one is for this zone",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", zones("zone-a")), ep("10.0.0.2", zones("zone-b")), ep("10.0.0.3", notReady))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name: "zone hints are ignored when one ready endpoint lacks them",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", zones("zone-a")), ep("10.0.0.2"))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name: "zone hints on not-ready endpoints do not matter",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", zones("zone-a")), ep("10.0.0.2", zones("zone-b")), ep("10.0.0.3", notReady /* no hints */))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name: "zone hints are ignored when none is for this zone",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", zones("zone-b")), ep("10.0.0.2", zones("zone-c")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name: "zone hints are ignored when the node has no zone label",
			svc:  svc(),
			node: &Node{Name: "me"},
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", zones("zone-a")), ep("10.0.0.2", zones("zone-b")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name: "node hints take precedence over zone hints",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", zones("zone-a"), nodes("other")), ep("10.0.0.2", zones("zone-b"), nodes("me")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.2:8080 C"},
		},
		{
			name: "node hints are ignored when one ready endpoint lacks them, zone hints still apply",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", zones("zone-a")), ep("10.0.0.2", zones("zone-b"), nodes("me")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C"},
		},
		{
			name: "node hints are ignored when none is for this node",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", nodes("n1")), ep("10.0.0.2", nodes("n2")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name: "topology is not applied to the terminating fallback",
			svc:  svc(),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", terminating, zones("zone-b")), ep("10.0.0.2", terminating, zones("zone-a")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name: "zone hints do not apply to local-policy traffic",
			svc:  svc(itpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", local, zones("zone-b")), ep("10.0.0.2", zones("zone-a")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 L"},
		},

		// Traffic policies.
		{
			name:   "internal policy Local uses only this node's endpoints",
			svc:    svc(itpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", local), ep("10.0.0.2"))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 L"},
		},
		{
			name:   "internal policy Local without local endpoints: endpoints exist but none reachable (drop, not reject)",
			svc:    svc(itpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.2"))},
			want:   []string{"IPV4 http/TCP has"},
		},
		{
			name:   "internal policy Local falls back to local terminating endpoints even when remote ones are ready",
			svc:    svc(itpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", local, terminating), ep("10.0.0.2"))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 L"},
		},
		{
			name: "the local fallback is independent of the cluster set",
			svc:  svc(svcType(globalv1.ServiceType_NODE_PORT), etpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", local, terminating), ep("10.0.0.2"))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 L, 10.0.0.2:8080 C"},
		},
		{
			name: "local ready endpoints are preferred over local terminating ones",
			svc:  svc(itpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", local, terminating), ep("10.0.0.2", local))},
			want: []string{"IPV4 http/TCP has: 10.0.0.2:8080 L"},
		},
		{
			name: "external policy Local on a NodePort: cluster set for internal traffic, local set for external",
			svc:  svc(svcType(globalv1.ServiceType_NODE_PORT), etpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", local), ep("10.0.0.2"))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 CL, 10.0.0.2:8080 C"},
		},
		{
			name:   "external policy Local is ignored on a ClusterIP service without external IPs",
			svc:    svc(etpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", local), ep("10.0.0.2"))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 C, 10.0.0.2:8080 C"},
		},
		{
			name:   "external policy Local applies to a ClusterIP service with external IPs",
			svc:    svc(etpLocal, externalIPs("192.0.2.10")),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", local), ep("10.0.0.2"))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 CL, 10.0.0.2:8080 C"},
		},
		{
			name:   "internal policy Local on a NodePort still needs the cluster set for external traffic",
			svc:    svc(svcType(globalv1.ServiceType_NODE_PORT), itpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1", local), ep("10.0.0.2"))},
			want:   []string{"IPV4 http/TCP has: 10.0.0.1:8080 CL, 10.0.0.2:8080 C"},
		},
		{
			name: "with topology and a Local policy, reachable endpoints are the union of both sets",
			svc:  svc(svcType(globalv1.ServiceType_NODE_PORT), etpLocal),
			slices: []*globalv1.EndpointSlice{slice("s1",
				ep("10.0.0.1", local, zones("zone-b")), ep("10.0.0.2", zones("zone-a")))},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 L, 10.0.0.2:8080 C"},
		},

		// Dual-stack.
		{
			name: "a dual-stack service has one view per family, each with its own endpoints",
			svc:  svc(clusterIPs("10.96.0.1", "fd00::1")),
			slices: []*globalv1.EndpointSlice{
				slice("v4", ep("10.0.0.1")),
				slice("v6", ep("fd00:10::1", notReady), ep("fd00:10::2", terminating)),
			},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C", "IPV6 http/TCP has: fd00:10::2:8080 C"},
		},
		{
			name:   "an IPv6-primary dual-stack service still lists IPv4 first",
			svc:    svc(clusterIPs("fd00::1", "10.96.0.1")),
			slices: []*globalv1.EndpointSlice{slice("v6", ep("fd00:10::1"))},
			want:   []string{"IPV4 http/TCP none", "IPV6 http/TCP has: fd00:10::1:8080 C"},
		},
		{
			name:   "a single-stack IPv6 service has no IPv4 view, and IPv4 slices are not used",
			svc:    svc(clusterIPs("fd00::1")),
			slices: []*globalv1.EndpointSlice{slice("v4", ep("10.0.0.1")), slice("v6", ep("fd00:10::1"))},
			want:   []string{"IPV6 http/TCP has: fd00:10::1:8080 C"},
		},
		{
			name: "topology is decided per family",
			svc:  svc(clusterIPs("10.96.0.1", "fd00::1")),
			slices: []*globalv1.EndpointSlice{
				slice("v4", ep("10.0.0.1", zones("zone-a")), ep("10.0.0.2", zones("zone-b"))),
				slice("v6", ep("fd00:10::1", zones("zone-a")), ep("fd00:10::2")),
			},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 C", "IPV6 http/TCP has: fd00:10::1:8080 C, fd00:10::2:8080 C"},
		},
		{
			name: "external IPs of one family only make that family externally accessible",
			svc:  svc(clusterIPs("10.96.0.1", "fd00::1"), itpLocal, externalIPs("192.0.2.10")),
			slices: []*globalv1.EndpointSlice{
				slice("v4", ep("10.0.0.1", local), ep("10.0.0.2")),
				slice("v6", ep("fd00:10::1", local), ep("fd00:10::2")),
			},
			want: []string{"IPV4 http/TCP has: 10.0.0.1:8080 CL, 10.0.0.2:8080 C", "IPV6 http/TCP has: fd00:10::1:8080 L"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := me
			if tc.node != nil {
				node = *tc.node
			}
			got := summary(ServiceView(tc.svc, tc.slices, node, tc.opts))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}
