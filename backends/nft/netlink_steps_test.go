package nft

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// netlinkStep is one change of the state, and how its transactions must
// be written.
type netlinkStep struct {
	name string
	do   func(f *fixture)
	// fallback: a substring of the reason the transaction of some table
	// went through nft ("" : every table's went through netlink).
	fallback string
}

// netlinkSteps change services in every way an incremental sync writes:
// endpoints, new and deleted services of every kind, affinity sets
// created, replaced and deleted, no-endpoint elements with comments, stale
// chains deleted.
func netlinkSteps() []netlinkStep {
	rich := richServices()
	web4, lb4, empty4, sticky4, web6 := rich[0], rich[1], rich[2], rich[3], rich[6]
	return []netlinkStep{
		{name: "one endpoint of a service changes", do: func(f *fixture) {
			se := clone(web4)
			se.Endpoints[1].Ip = "10.0.2.99"
			f.set(se)
		}},
		{name: "a service gains endpoints (the intervals of its map are cut again)", do: func(f *fixture) {
			se := clone(web4)
			ep("http", tcp, "10.0.3.5", 8080, "cluster")(se)
			ep("http", tcp, "10.0.4.5", 8080, "cluster")(se)
			f.set(se)
		}},
		{name: "UDP and SCTP services are added, in both families", do: func(f *fixture) {
			f.set(service("ns", "u", "10.96.0.40", port("p", udp, 53, 0, true), ep("p", udp, "10.0.2.40", 5353, "cluster"), ep("p", udp, "10.0.3.40", 5353, "cluster")),
				service("ns", "s", "10.96.0.41", port("p", sctp, 9, 0, true), ep("p", sctp, "10.0.2.41", 99, "cluster")),
				service("ns", "u", "fd00:96::40", port("p", udp, 53, 0, true), ep("p", udp, "fd01:2::40", 5353, "cluster")),
				service("ns", "s", "fd00:96::41", port("p", sctp, 9, 0, true), ep("p", sctp, "fd01:2::41", 99, "cluster"), ep("p", sctp, "fd01:3::41", 99, "cluster")))
		}},
		{name: "a NodePort service with a Local policy and an endpoint here is added", do: func(f *fixture) {
			f.set(service("ns", "local", "10.96.0.20", port("p", tcp, 90, 30090, true),
				withSvc(func(s *localv1.Service) {
					s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
					s.ExternalIps = []string{"198.51.100.20"}
				}),
				ep("p", tcp, "10.0.1.20", 9090, "cluster", "local", "here"), ep("p", tcp, "10.0.2.20", 9090, "cluster")),
				service("ns", "local", "fd00:96::20", port("p", tcp, 90, 30090, true),
					withSvc(func(s *localv1.Service) { s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL }),
					ep("p", tcp, "fd01:1::20", 9090, "cluster", "local", "here"), ep("p", tcp, "fd01:2::20", 9090, "cluster")))
		}},
		{name: "services with affinity are added, in both families", do: func(f *fixture) {
			f.set(service("ns", "sticky2", "10.96.0.21", port("p", udp, 53, 0, true),
				withSvc(func(s *localv1.Service) { s.ClientIpAffinitySeconds = 300 }),
				ep("p", udp, "10.0.2.21", 5353, "cluster"), ep("p", udp, "10.0.3.21", 5353, "cluster"), ep("p", udp, "10.0.4.21", 5353, "cluster")),
				service("ns", "sticky2", "fd00:96::21", port("p", tcp, 53, 0, true),
					withSvc(func(s *localv1.Service) { s.ClientIpAffinitySeconds = 300 }),
					ep("p", tcp, "fd01:2::21", 5353, "cluster")))
		}},
		{name: "an affinity endpoint is replaced", do: func(f *fixture) {
			se := clone(web6)
			se.Endpoints[1].Ip = "fd01:2::99"
			f.set(se)
		}},
		{name: "an affinity timeout changes (sets replaced)", do: func(f *fixture) {
			se := clone(sticky4)
			se.Service.ClientIpAffinitySeconds = 60
			f.set(se)
		}},
		{name: "a service with affinity is deleted", do: func(f *fixture) {
			f.del(backend.KeyOf(sticky4))
		}},
		{name: "a service loses all its endpoints (reject elements with comments)", do: func(f *fixture) {
			se := clone(web4)
			se.Endpoints = nil
			se.Service.Ports[0].HasEndpoints = false
			f.set(se)
		}},
		{name: "a service without endpoints gets one", do: func(f *fixture) {
			se := clone(empty4)
			se.Service.Ports[0].HasEndpoints = true
			ep("p", tcp, "10.0.2.7", 81, "cluster")(se)
			f.set(se)
		}},
		{name: "stale chains are deleted", do: func(f *fixture) {
			f.clock = f.clock.Add(2 * staleDelay)
			f.sync(backend.Changes{})
		}},
		{name: "a LoadBalancer endpoint changes (its firewall chain does not)", do: func(f *fixture) {
			se := clone(lb4)
			se.Endpoints[1].Ip = "10.0.2.66"
			f.set(se)
		}},
		{name: "loadBalancerSourceRanges change to one range (a comparison)", do: func(f *fixture) {
			se := clone(lb4)
			se.Service.LoadBalancerSourceRanges = []string{"203.0.113.0/25"}
			f.set(se)
		}},
		{name: "loadBalancerSourceRanges up to the last address: nft writes them", fallback: "ends of the address space", do: func(f *fixture) {
			se := clone(lb4)
			se.Service.LoadBalancerSourceRanges = []string{"10.0.0.0/8", "255.255.255.0/24"}
			f.set(se)
		}},
		{name: "loadBalancerSourceRanges change to overlapping, adjacent and unaligned ranges (an interval set)", do: func(f *fixture) {
			se := clone(lb4)
			se.Service.LoadBalancerSourceRanges = []string{"10.8.0.0/24", "10.8.1.0/24", "10.9.0.0/16", "10.9.4.0/22", "172.20.0.0/14", "192.168.0.0/23"}
			f.set(se)
		}},
		{name: "IPv6 loadBalancerSourceRanges of several ranges", do: func(f *fixture) {
			se := clone(rich[7])
			se.Service.LoadBalancerSourceRanges = []string{"2001:db8::/64", "2001:db8:0:1::/64", "2001:db8:1::/60", "fd00::/8"}
			f.set(se)
		}},
		{name: "LoadBalancers with one source range each are added, in both families", do: func(f *fixture) {
			lb := func(clusterIP, lbIP, sourceRange, epIP string) *localv1.ServiceEndpoints {
				return service("ns", "lb1", clusterIP, port("p", tcp, 8443, 30444, true),
					withSvc(func(s *localv1.Service) {
						s.Type = localv1.ServiceType_LOAD_BALANCER
						s.LoadBalancerIps = []string{lbIP}
						s.LoadBalancerSourceRanges = []string{sourceRange}
					}),
					ep("p", tcp, epIP, 8443, "cluster"))
			}
			f.set(lb("10.96.0.30", "203.0.113.30", "198.51.100.0/22", "10.0.2.30"),
				lb("fd00:96::30", "2001:db8:30::1", "2001:db8:3000::/36", "fd01:2::30"))
		}},
		{name: "a service is deleted", do: func(f *fixture) {
			f.del(backend.KeyOf(rich[5]))
		}},
		{name: "stale chains are deleted again", do: func(f *fixture) {
			f.clock = f.clock.Add(2 * staleDelay)
			f.sync(backend.Changes{})
		}},
	}
}

func clone(se *localv1.ServiceEndpoints) *localv1.ServiceEndpoints {
	out := &localv1.ServiceEndpoints{}
	b, _ := json.Marshal(se)
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

// checkPath checks how a sync's transactions were written.
func checkPath(t *testing.T, step string, last []SyncStats, fallback string) {
	t.Helper()
	wrote, fell := false, false
	for _, st := range last {
		if st.Operations == 0 {
			continue
		}
		wrote = true
		switch {
		case st.Full:
			t.Errorf("%s: %s: a full sync", step, st.Family)
		case st.Fallback != "":
			fell = true
			if fallback == "" || !strings.Contains(st.Fallback, fallback) {
				t.Errorf("%s: %s: written by nft (%s)", step, st.Family, st.Fallback)
			}
		case !st.Netlink:
			t.Errorf("%s: %s: not written through netlink: %+v", step, st.Family, st)
		}
	}
	if !wrote && !strings.HasPrefix(step, "stale") {
		t.Errorf("%s: nothing written", step)
	}
	if fallback != "" && !fell {
		t.Errorf("%s: expected nft to write it (%q), but netlink did", step, fallback)
	}
}
