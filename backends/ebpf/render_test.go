package ebpf

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/kpng/kpng/api/localv1"
)

func TestRender(t *testing.T) {
	ep := func(ip string, cluster, local bool) *localv1.Endpoint {
		return &localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_TCP, Ip: ip, Port: 8080, InClusterSet: cluster, InLocalSet: local}
	}
	base := func() *localv1.ServiceEndpoints {
		return &localv1.ServiceEndpoints{
			Service: &localv1.Service{Namespace: "ns", Name: "web", Family: localv1.IPFamily_IPV4, ClusterIp: "10.96.0.10",
				Ports: []*localv1.ServicePort{{Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, NodePort: 30080, HasEndpoints: true}}},
			Endpoints: []*localv1.Endpoint{ep("10.0.1.1", true, false), ep("10.0.2.1", true, true)},
		}
	}
	node := []netip.Addr{netip.MustParseAddr("192.168.0.1")}
	cases := []struct {
		name   string
		mutate func(*localv1.ServiceEndpoints)
		// want: frontend -> endpoints (and "drop" for a dropping empty set)
		want map[string][]string
		drop map[string]bool
	}{
		{
			name: "cluster IP and node port use the cluster set; from outside, masqueraded",
			want: map[string][]string{"10.96.0.10:80": {"10.0.1.1:8080", "10.0.2.1:8080"}, "192.168.0.1:30080": {"10.0.1.1:8080", "10.0.2.1:8080"}, "192.168.0.1:30080 outside": {"10.0.1.1:8080", "10.0.2.1:8080"}},
		},
		{
			name:   "internal traffic policy Local: the cluster IP uses the local set, the node port still the cluster set",
			mutate: func(se *localv1.ServiceEndpoints) { se.Service.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL },
			want:   map[string][]string{"10.96.0.10:80": {"10.0.2.1:8080"}, "192.168.0.1:30080": {"10.0.1.1:8080", "10.0.2.1:8080"}, "192.168.0.1:30080 outside": {"10.0.1.1:8080", "10.0.2.1:8080"}},
		},
		{
			name: "external policy Local: traffic from the node short-circuits to the cluster set, as kube-proxy; from outside, the local set, not masqueraded",
			mutate: func(se *localv1.ServiceEndpoints) {
				se.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
				se.Service.ExternalIps = []string{"203.0.113.1"}
				se.Service.LoadBalancerIps = []string{"198.51.100.1"}
			},
			want: map[string][]string{
				"10.96.0.10:80": {"10.0.1.1:8080", "10.0.2.1:8080"}, "192.168.0.1:30080": {"10.0.1.1:8080", "10.0.2.1:8080"},
				"203.0.113.1:80": {"10.0.1.1:8080", "10.0.2.1:8080"}, "198.51.100.1:80": {"10.0.1.1:8080", "10.0.2.1:8080"},
				"192.168.0.1:30080 outside": {"10.0.2.1:8080"}, "203.0.113.1:80 outside": {"10.0.2.1:8080"}, "198.51.100.1:80 outside": {"10.0.2.1:8080"},
			},
		},
		{
			name: "external policy Local with no local endpoint: dropped from outside, as kube-proxy",
			mutate: func(se *localv1.ServiceEndpoints) {
				se.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
				se.Endpoints = se.Endpoints[:1]
			},
			want: map[string][]string{"10.96.0.10:80": {"10.0.1.1:8080"}, "192.168.0.1:30080": {"10.0.1.1:8080"}, "192.168.0.1:30080 outside": nil},
			drop: map[string]bool{"192.168.0.1:30080 outside": true},
		},
		{
			name: "internal Local with no local endpoint while others exist: dropped, as kube-proxy",
			mutate: func(se *localv1.ServiceEndpoints) {
				se.Service.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
				se.Endpoints = se.Endpoints[:1]
			},
			want: map[string][]string{"10.96.0.10:80": nil, "192.168.0.1:30080": {"10.0.1.1:8080"}, "192.168.0.1:30080 outside": {"10.0.1.1:8080"}},
			drop: map[string]bool{"10.96.0.10:80": true},
		},
		{
			name: "no endpoint anywhere: refused, not dropped",
			mutate: func(se *localv1.ServiceEndpoints) {
				se.Endpoints = nil
				se.Service.Ports[0].HasEndpoints = false
			},
			want: map[string][]string{"10.96.0.10:80": nil, "192.168.0.1:30080": nil, "192.168.0.1:30080 outside": nil},
		},
		{
			name: "endpoints not in any set are never used (not ready, other zone: the view decided)",
			mutate: func(se *localv1.ServiceEndpoints) {
				se.Endpoints = append(se.Endpoints, ep("10.0.3.1", false, false))
			},
			want: map[string][]string{"10.96.0.10:80": {"10.0.1.1:8080", "10.0.2.1:8080"}, "192.168.0.1:30080": {"10.0.1.1:8080", "10.0.2.1:8080"}, "192.168.0.1:30080 outside": {"10.0.1.1:8080", "10.0.2.1:8080"}},
		},
		{
			name: "endpoints of another port are not this port's",
			mutate: func(se *localv1.ServiceEndpoints) {
				se.Service.Ports = append(se.Service.Ports, &localv1.ServicePort{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53, HasEndpoints: true})
				se.Endpoints = append(se.Endpoints, &localv1.Endpoint{PortName: "dns", Protocol: localv1.Protocol_UDP, Ip: "10.0.1.1", Port: 5353, InClusterSet: true})
			},
			want: map[string][]string{
				"10.96.0.10:80": {"10.0.1.1:8080", "10.0.2.1:8080"}, "192.168.0.1:30080": {"10.0.1.1:8080", "10.0.2.1:8080"},
				"192.168.0.1:30080 outside": {"10.0.1.1:8080", "10.0.2.1:8080"}, "10.96.0.10:53/udp": {"10.0.1.1:5353"},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			se := base()
			if c.mutate != nil {
				c.mutate(se)
			}
			r, err := Render(se, node)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for f, rt := range r.Frontends {
				name := netip.AddrPortFrom(f.Addr, f.Port).String()
				if f.Proto == protoUDP {
					name += "/udp"
				}
				if f.Outside {
					name += " outside"
					if want := f.Port == 30080; rt.NodePort != want {
						t.Errorf("%s: node port %v, want %v", name, rt.NodePort, want)
					}
					// Masquerade under the Cluster external policy only.
					if want := se.Service.ExternalTrafficPolicy != localv1.TrafficPolicy_LOCAL; rt.Masquerade != want {
						t.Errorf("%s: masquerade %v, want %v", name, rt.Masquerade, want)
					}
				} else if rt.Masquerade {
					t.Errorf("%s: masquerade on a frontend of the node's sockets", name)
				}
				var eps []string
				for _, e := range r.Sets[rt.Set].Endpoints {
					eps = append(eps, e.String())
				}
				got[name] = eps
				if r.Sets[rt.Set].Drop != c.drop[name] {
					t.Errorf("%s: drop %v, want %v", name, r.Sets[rt.Set].Drop, c.drop[name])
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("frontends %v, want %v", got, c.want)
			}
			for f, want := range c.want {
				if g, ok := got[f]; !ok || !slices.Equal(g, want) {
					t.Errorf("%s: %v, want %v", f, g, want)
				}
			}
		})
	}
}
