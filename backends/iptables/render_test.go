package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kpng/kpng/api/localv1"
)

// ep is an endpoint of port "p" in the Cluster set (and, on this node, in
// the Local set), as the brain resolves a ready endpoint.
func ep(ip string, port int32, local bool) *localv1.Endpoint {
	return &localv1.Endpoint{PortName: "p", Protocol: localv1.Protocol_TCP, Ip: ip, Port: port,
		Ready: true, Serving: true, OnThisNode: local, InClusterSet: true, InLocalSet: local}
}

func svc(name string, mut func(s *localv1.Service), eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
	s := &localv1.Service{Namespace: "ns", Name: name, Family: localv1.IPFamily_IPV4, Type: localv1.ServiceType_CLUSTER_IP,
		ClusterIp: "10.96.0.10",
		Ports:     []*localv1.ServicePort{{Name: "p", Protocol: localv1.Protocol_TCP, Port: 80, TargetPort: 8080, HasEndpoints: len(eps) > 0}}}
	if mut != nil {
		mut(s)
	}
	return &localv1.ServiceEndpoints{Service: s, Endpoints: eps}
}

// readable prints what render wrote for a service, with the hashed chain
// names replaced by what they hash (SVC-ns/web:p, SEP-ns/web:p/10.0.0.1:80).
func readable(se *localv1.ServiceEndpoints, r *rendered) string {
	names := func(s string) string {
		for _, p := range se.Service.Ports {
			name, proto := portName(se.Service, p), protoName(p.Protocol)
			s = strings.ReplaceAll(s, hashName(name, proto), name)
			for _, e := range se.Endpoints {
				es := endpointString(e.Ip, e.Port)
				s = strings.ReplaceAll(s, hashName(name, proto, es), es)
			}
		}
		return s
	}
	var b strings.Builder
	for i, f := range r.frags {
		if len(f) > 0 {
			b.WriteString("# " + sharedChains[i].table + "\n")
			b.Write(f)
		}
	}
	// Own chains in the order of their readable names.
	var chains []string
	for _, c := range r.chains {
		chains = append(chains, names("# nat "+c.name+"\n"+string(c.rules)))
	}
	slices.Sort(chains)
	return names(b.String()) + strings.Join(chains, "")
}

// twoEndpointChains are the nat chains of ns/web:p (10.96.0.10:80) with its
// two endpoints, 10.244.1.5:8080 and 10.244.2.7:8080, local traffic told by
// 10.244.0.0/16.
const twoEndpointChains = `# nat KPNG-SEP-10.244.1.5:8080
-A KPNG-SEP-10.244.1.5:8080 -s 10.244.1.5 -j KPNG-MARK-MASQ
-A KPNG-SEP-10.244.1.5:8080 -m tcp -p tcp -j DNAT --to-destination 10.244.1.5:8080
# nat KPNG-SEP-10.244.2.7:8080
-A KPNG-SEP-10.244.2.7:8080 -s 10.244.2.7 -j KPNG-MARK-MASQ
-A KPNG-SEP-10.244.2.7:8080 -m tcp -p tcp -j DNAT --to-destination 10.244.2.7:8080
# nat KPNG-SVC-ns/web:p
-A KPNG-SVC-ns/web:p -m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 ! -s 10.244.0.0/16 -j KPNG-MARK-MASQ
-A KPNG-SVC-ns/web:p -m statistic --mode random --probability 0.5000000000 -j KPNG-SEP-10.244.1.5:8080
-A KPNG-SVC-ns/web:p -j KPNG-SEP-10.244.2.7:8080
`

func TestRender(t *testing.T) {
	local := localDetector{ifLocal: []string{"-s", "10.244.0.0/16"}, ifNotLocal: []string{"!", "-s", "10.244.0.0/16"}}
	cases := []struct {
		name string
		r    renderer
		se   *localv1.ServiceEndpoints
		want string
	}{{
		name: "cluster IP with two endpoints: random balance, hairpin masquerade, off-cluster masquerade",
		r:    renderer{local: local},
		se:   svc("web", nil, ep("10.244.1.5", 8080, true), ep("10.244.2.7", 8080, false)),
		want: `# nat
-A KPNG-SERVICES -m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KPNG-SVC-ns/web:p
` + twoEndpointChains,
	}, {
		name: "no endpoints: reject in filter, no nat chain",
		r:    renderer{local: local},
		se: svc("web", func(s *localv1.Service) {
			s.Type = localv1.ServiceType_NODE_PORT
			s.Ports[0].NodePort = 30080
			s.ExternalIps = []string{"192.0.2.1"}
		}),
		want: `# filter
-A KPNG-SERVICES -m comment --comment "ns/web:p has no endpoints" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j REJECT
# filter
-A KPNG-EXTERNAL-SERVICES -m comment --comment "ns/web:p has no endpoints" -m tcp -p tcp -d 192.0.2.1 --dport 80 -j REJECT
-A KPNG-EXTERNAL-SERVICES -m comment --comment "ns/web:p has no endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j REJECT
`,
	}, {
		name: "masquerade-all, session affinity with recent",
		r:    renderer{masqueradeAll: true},
		se: svc("web", func(s *localv1.Service) { s.ClientIpAffinitySeconds = 10800 },
			ep("10.244.1.5", 8080, false)),
		want: `# nat
-A KPNG-SERVICES -m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KPNG-SVC-ns/web:p
# nat KPNG-SEP-10.244.1.5:8080
-A KPNG-SEP-10.244.1.5:8080 -s 10.244.1.5 -j KPNG-MARK-MASQ
-A KPNG-SEP-10.244.1.5:8080 -m recent --name KPNG-SEP-10.244.1.5:8080 --set -m tcp -p tcp -j DNAT --to-destination 10.244.1.5:8080
# nat KPNG-SVC-ns/web:p
-A KPNG-SVC-ns/web:p -m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KPNG-MARK-MASQ
-A KPNG-SVC-ns/web:p -m recent --name KPNG-SEP-10.244.1.5:8080 --rcheck --seconds 10800 --reap -j KPNG-SEP-10.244.1.5:8080
-A KPNG-SVC-ns/web:p -j KPNG-SEP-10.244.1.5:8080
`,
	}, {
		name: "internal policy Local without local endpoints: drop the cluster IP",
		r:    renderer{},
		se: svc("web", func(s *localv1.Service) { s.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL },
			&localv1.Endpoint{PortName: "p", Protocol: localv1.Protocol_TCP, Ip: "10.244.2.7", Port: 8080, Ready: true}),
		want: `# filter
-A KPNG-SERVICES -m comment --comment "ns/web:p has no local endpoints" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j DROP
`,
	}, {
		name: "node port, external policy Local: short circuits, SVL, health check port",
		r:    renderer{local: local},
		se: svc("web", func(s *localv1.Service) {
			s.Type = localv1.ServiceType_NODE_PORT
			s.Ports[0].NodePort = 30080
			s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
			s.HealthCheckNodePort = 32000
		}, ep("10.244.1.5", 8080, true), ep("10.244.2.7", 8080, false)),
		want: `# nat
-A KPNG-SERVICES -m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KPNG-SVC-ns/web:p
# nat
-A KPNG-NODEPORTS -m comment --comment "ns/web:p" -m tcp -p tcp --dport 30080 -j KPNG-EXT-ns/web:p
# filter
-A KPNG-NODEPORTS -m comment --comment "ns/web health check node port" -m tcp -p tcp --dport 32000 -j ACCEPT
# nat KPNG-EXT-ns/web:p
-A KPNG-EXT-ns/web:p -m comment --comment "pod traffic for ns/web:p external destinations" -s 10.244.0.0/16 -j KPNG-SVC-ns/web:p
-A KPNG-EXT-ns/web:p -m comment --comment "masquerade LOCAL traffic for ns/web:p external destinations" -m addrtype --src-type LOCAL -j KPNG-MARK-MASQ
-A KPNG-EXT-ns/web:p -m comment --comment "route LOCAL traffic for ns/web:p external destinations" -m addrtype --src-type LOCAL -j KPNG-SVC-ns/web:p
-A KPNG-EXT-ns/web:p -j KPNG-SVL-ns/web:p
` + twoEndpointChains + `# nat KPNG-SVL-ns/web:p
-A KPNG-SVL-ns/web:p -j KPNG-SEP-10.244.1.5:8080
`,
	}, {
		name: "node port, external policy Local, no local endpoint: drop external, keep short circuits",
		r:    renderer{},
		se: svc("web", func(s *localv1.Service) {
			s.Type = localv1.ServiceType_NODE_PORT
			s.Ports[0].NodePort = 30080
			s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
		}, ep("10.244.2.7", 8080, false)),
		want: `# nat
-A KPNG-SERVICES -m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KPNG-SVC-ns/web:p
# nat
-A KPNG-NODEPORTS -m comment --comment "ns/web:p" -m tcp -p tcp --dport 30080 -j KPNG-EXT-ns/web:p
# filter
-A KPNG-EXTERNAL-SERVICES -m comment --comment "ns/web:p has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j DROP
# nat KPNG-EXT-ns/web:p
-A KPNG-EXT-ns/web:p -m comment --comment "masquerade LOCAL traffic for ns/web:p external destinations" -m addrtype --src-type LOCAL -j KPNG-MARK-MASQ
-A KPNG-EXT-ns/web:p -m comment --comment "route LOCAL traffic for ns/web:p external destinations" -m addrtype --src-type LOCAL -j KPNG-SVC-ns/web:p
# nat KPNG-SEP-10.244.2.7:8080
-A KPNG-SEP-10.244.2.7:8080 -s 10.244.2.7 -j KPNG-MARK-MASQ
-A KPNG-SEP-10.244.2.7:8080 -m tcp -p tcp -j DNAT --to-destination 10.244.2.7:8080
# nat KPNG-SVC-ns/web:p
-A KPNG-SVC-ns/web:p -j KPNG-SEP-10.244.2.7:8080
`,
	}, {
		name: "load balancer with source ranges containing the node: firewall chain, VIP exception, filter drop",
		r:    renderer{nodeIP: mustAddr("192.168.77.10")},
		se: svc("web", func(s *localv1.Service) {
			s.Type = localv1.ServiceType_LOAD_BALANCER
			s.Ports[0].NodePort = 30080
			s.LoadBalancerIps = []string{"203.0.113.7"}
			s.LoadBalancerSourceRanges = []string{"192.168.77.0/24"}
		}, ep("10.244.1.5", 8080, true)),
		want: `# nat
-A KPNG-SERVICES -m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KPNG-SVC-ns/web:p
-A KPNG-SERVICES -m comment --comment "ns/web:p loadbalancer IP" -m tcp -p tcp -d 203.0.113.7 --dport 80 -j KPNG-FW-ns/web:p
# nat
-A KPNG-NODEPORTS -m comment --comment "ns/web:p" -m tcp -p tcp --dport 30080 -j KPNG-EXT-ns/web:p
# filter
-A KPNG-PROXY-FIREWALL -m comment --comment "ns/web:p traffic not accepted by KPNG-FW-ns/web:p" -m tcp -p tcp -d 203.0.113.7 --dport 80 -j DROP
# nat KPNG-EXT-ns/web:p
-A KPNG-EXT-ns/web:p -m comment --comment "masquerade traffic for ns/web:p external destinations" -j KPNG-MARK-MASQ
-A KPNG-EXT-ns/web:p -j KPNG-SVC-ns/web:p
# nat KPNG-FW-ns/web:p
-A KPNG-FW-ns/web:p -m comment --comment "ns/web:p loadbalancer IP" -s 192.168.77.0/24 -j KPNG-EXT-ns/web:p
-A KPNG-FW-ns/web:p -m comment --comment "ns/web:p loadbalancer IP" -s 203.0.113.7 -j KPNG-EXT-ns/web:p
-A KPNG-FW-ns/web:p -m comment --comment "other traffic to ns/web:p will be dropped by KPNG-PROXY-FIREWALL"
# nat KPNG-SEP-10.244.1.5:8080
-A KPNG-SEP-10.244.1.5:8080 -s 10.244.1.5 -j KPNG-MARK-MASQ
-A KPNG-SEP-10.244.1.5:8080 -m tcp -p tcp -j DNAT --to-destination 10.244.1.5:8080
# nat KPNG-SVC-ns/web:p
-A KPNG-SVC-ns/web:p -j KPNG-SEP-10.244.1.5:8080
`,
	}, {
		name: "IPv6 UDP with an external IP",
		r:    renderer{ipv6: true},
		se: func() *localv1.ServiceEndpoints {
			e := ep("fd00:10:244:1::5", 53, false)
			e.Protocol = localv1.Protocol_UDP
			se := svc("dns", func(s *localv1.Service) {
				s.Family = localv1.IPFamily_IPV6
				s.ClusterIp = "fd00:10:96::a"
				s.ExternalIps = []string{"2001:db8::1"}
				s.Ports[0].Protocol = localv1.Protocol_UDP
			}, e)
			return se
		}(),
		want: `# nat
-A KPNG-SERVICES -m comment --comment "ns/dns:p cluster IP" -m udp -p udp -d fd00:10:96::a --dport 80 -j KPNG-SVC-ns/dns:p
-A KPNG-SERVICES -m comment --comment "ns/dns:p external IP" -m udp -p udp -d 2001:db8::1 --dport 80 -j KPNG-EXT-ns/dns:p
# nat KPNG-EXT-ns/dns:p
-A KPNG-EXT-ns/dns:p -m comment --comment "masquerade traffic for ns/dns:p external destinations" -j KPNG-MARK-MASQ
-A KPNG-EXT-ns/dns:p -j KPNG-SVC-ns/dns:p
# nat KPNG-SEP-[fd00:10:244:1::5]:53
-A KPNG-SEP-[fd00:10:244:1::5]:53 -s fd00:10:244:1::5 -j KPNG-MARK-MASQ
-A KPNG-SEP-[fd00:10:244:1::5]:53 -m udp -p udp -j DNAT --to-destination [fd00:10:244:1::5]:53
# nat KPNG-SVC-ns/dns:p
-A KPNG-SVC-ns/dns:p -j KPNG-SEP-[fd00:10:244:1::5]:53
`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := readable(tc.se, tc.r.render(tc.se))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("render (-want +got):\n%s\ngot:\n%s", diff, got)
			}
		})
	}
}

func TestChainNamesFitIptables(t *testing.T) {
	for _, p := range []string{prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixSEP} {
		if n := len(p + hashName("x")); n > 28 {
			t.Errorf("%s chains are %d characters; iptables allows 28", p, n)
		}
	}
	for _, c := range []string{chainServices, chainExternalServices, chainNodePorts, chainPostrouting, chainMarkMasq, chainForward, chainProxyFirewall, chainFirewall, chainCanary} {
		if len(c) > 28 {
			t.Errorf("%s is longer than 28 characters", c)
		}
	}
	if hashName("ns/web:p", "tcp") != hashName("ns/web:p", "tcp") || hashName("ns/web:p", "tcp") == hashName("ns/web:p", "udp") {
		t.Error("chain hashes must be stable and distinct per protocol")
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestHashNameIsStable pins chain names: a restart of any kpng version
// must find its chains under the same names.
func TestHashNameIsStable(t *testing.T) {
	for _, tc := range []struct {
		parts []string
		want  string
	}{
		{[]string{"ns/web:p", "tcp"}, hashNameReference("ns/web:p", "tcp")},
		{[]string{"ns/web:p", "tcp", "10.244.1.5:8080"}, hashNameReference("ns/web:p", "tcp", "10.244.1.5:8080")},
		{[]string{"default/kubernetes:https", "tcp"}, "MN5YJVHTCBXDPS55"}, // computed independently (Python hashlib, base64)
	} {
		if got := hashName(tc.parts...); got != tc.want || len(got) != 16 {
			t.Errorf("hashName(%q) = %q, want %q", tc.parts, got, tc.want)
		}
	}
}

// hashNameReference is the definition: the first 16 characters of the
// base32 encoding of the SHA-256 of the parts joined by NUL.
func hashNameReference(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return base32.StdEncoding.EncodeToString(h[:])[:16]
}
