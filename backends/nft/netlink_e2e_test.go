//go:build e2e

package nft

import (
	"encoding/json"
	"fmt"
	"slices"
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
		{name: "loadBalancerSourceRanges change: nft writes the anonymous interval set", fallback: "saddr != {", do: func(f *fixture) {
			se := clone(lb4)
			se.Service.LoadBalancerSourceRanges = []string{"203.0.113.0/25"}
			f.set(se)
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

// TestNetlinkMatchesNft applies a sequence of incremental changes through
// netlink, then compares the kernel's tables (`nft -j list table`) with
// those a fresh full sync of the same state writes through nft. It does so
// for every detect-local mode (each writes different short-circuit rules)
// and for prefixes on and off byte boundaries.
func TestNetlinkMatchesNft(t *testing.T) {
	configs := map[string]func(*Config){
		"ClusterCIDR on byte boundaries": func(*Config) {},
		"ClusterCIDR off byte boundaries": func(c *Config) {
			c.ClusterCIDRs = []string{"10.0.0.0/14", "fd01::/60"}
		},
		"InterfaceNamePrefix": func(c *Config) {
			c.DetectLocalMode, c.PodInterfaceNamePrefix = LocalModeInterfaceNamePrefix, "veth"
		},
		"BridgeInterface": func(c *Config) {
			c.DetectLocalMode, c.PodBridgeInterface = LocalModeBridgeInterface, "cbr0"
		},
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range configs {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			configs[name](&cfg)
			inNetns(t, func(ns string) {
				f := realFixtureWith(t, cfg, true)
				f.set(richServices()...)
				for _, step := range netlinkSteps() {
					step.do(f)
					checkPath(t, step.name, f.b.Last, step.fallback)
				}
				got4, got6 := listTable(t, ns, "ip"), listTable(t, ns, "ip6")

				// The same state, written from scratch by nft.
				nftIn(t, ns, "delete", "table", "ip", "kpng")
				nftIn(t, ns, "delete", "table", "ip6", "kpng")
				ref := realFixtureWith(t, cfg, false)
				ref.state = f.state
				ref.sync(backend.Changes{})
				want4, want6 := listTable(t, ns, "ip"), listTable(t, ns, "ip6")
				if got4 != want4 {
					t.Errorf("IPv4 table written through netlink differs from nft's:\n%s", diffLines(got4, want4))
				}
				if got6 != want6 {
					t.Errorf("IPv6 table written through netlink differs from nft's:\n%s", diffLines(got6, want6))
				}
			})
		})
	}
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

// listTable is a table as `nft -j list table` shows it, in a canonical
// form: one object per line, without handles, chains and sets by name,
// rules by chain in their order, elements sorted. (The order in which
// chains, sets and elements are listed is the order of their creation,
// which differs between an incremental and a full sync.)
func listTable(t *testing.T, ns, fam string) string {
	t.Helper()
	out := nftIn(t, ns, "-j", "list", "table", fam, "kpng")
	var l struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("parsing the listing: %v", err)
	}
	var lines []string
	ruleIndex := map[string]int{}
	for _, obj := range l.Nftables {
		for kind, v := range obj {
			if kind == "metainfo" {
				continue
			}
			delete(v, "handle")
			if elems, ok := v["elem"].([]any); ok {
				slices.SortFunc(elems, func(a, b any) int {
					x, _ := json.Marshal(a)
					y, _ := json.Marshal(b)
					return strings.Compare(string(x), string(y))
				})
			}
			b, _ := json.Marshal(v)
			key := fmt.Sprintf("%s %v", kind, v["name"])
			if kind == "rule" {
				c := fmt.Sprint(v["chain"])
				key = fmt.Sprintf("rule %s %04d", c, ruleIndex[c])
				ruleIndex[c]++
			}
			lines = append(lines, key+" "+string(b))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// diffLines shows the lines only one side has.
func diffLines(got, want string) string {
	return "only after netlink:\n" + linesNotIn(got, want) + "only after nft:\n" + linesNotIn(want, got)
}
