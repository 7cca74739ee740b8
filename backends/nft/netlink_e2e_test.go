//go:build e2e

package nft

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/proxyutil/host"
)

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
			c.DetectLocalMode, c.PodInterfaceNamePrefix = host.LocalModeInterfaceNamePrefix, "veth"
		},
		"BridgeInterface": func(c *Config) {
			c.DetectLocalMode, c.PodBridgeInterface = host.LocalModeBridgeInterface, "cbr0"
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
			inNetns(t, func(ns *netnstest.Netns) {
				f := realFixtureWith(t, cfg, true)
				f.set(richServices()...)
				for _, step := range netlinkSteps() {
					step.do(f)
					checkPath(t, step.name, f.b.Last, step.fallback)
				}
				got4, got6 := listTable(t, ns, "ip"), listTable(t, ns, "ip6")
				gotDecls := mapDecls(t, ns)

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
				// The JSON listing shows a map's types, not the "typeof"
				// declaration nft prints from the user data we copy.
				if wantDecls := mapDecls(t, ns); gotDecls != wantDecls {
					t.Errorf("map declarations written through netlink differ from nft's:\n%s", diffLines(gotDecls, wantDecls))
				}
			})
		})
	}
}

// mapDecls lists every map of both tables with the declaration nft prints
// for it ("typeof ..." or "type ..."), sorted.
func mapDecls(t *testing.T, ns *netnstest.Netns) string {
	t.Helper()
	var decls []string
	for _, fam := range []string{"ip", "ip6"} {
		name := ""
		for _, line := range strings.Split(nftIn(t, ns, "list", "maps", fam), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "map" && f[2] == "{":
				name = f[1]
			case name != "" && len(f) > 0 && (f[0] == "typeof" || f[0] == "type"):
				decls = append(decls, fam+" "+name+": "+strings.Join(f, " "))
				name = ""
			}
		}
	}
	slices.Sort(decls)
	return strings.Join(decls, "\n")
}

// listTable is a table as `nft -j list table` shows it, in a canonical
// form: one object per line, without handles, chains and sets by name,
// rules by chain in their order, elements sorted. (The order in which
// chains, sets and elements are listed is the order of their creation,
// which differs between an incremental and a full sync.)
func listTable(t *testing.T, ns *netnstest.Netns, fam string) string {
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

// TestNetlinkFailureIsAtomic: a batch the kernel refuses changes nothing
// (the whole transaction is aborted), the sync fails, and the next one
// reads the table back and repairs it with nft.
func TestNetlinkFailureIsAtomic(t *testing.T) {
	inNetns(t, func(ns *netnstest.Netns) {
		f := realFixture(t)
		f.set(richServices()...)
		webChain := "service-Y6QD5CCT-ns/web/tcp/http"
		before := nftIn(t, ns, "list", "chain", "ip", "kpng", webChain)

		// Behind kpng's back: the element the next transaction deletes.
		nftIn(t, ns, "delete", "element", "ip", "kpng", "service-ips", "{ 10.96.0.5 . tcp . 80 }")
		web := clone(richServices()[0])
		web.Endpoints = nil
		web.Service.Ports[0].HasEndpoints = false
		f.state.Services[backend.KeyOf(web)] = web
		err := f.b.Sync(t.Context(), f.state, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web)}})
		if err == nil {
			t.Fatal("the sync succeeded although the kernel lacks an element it deletes")
		}
		if after := nftIn(t, ns, "list", "chain", "ip", "kpng", webChain); after != before {
			t.Errorf("the failed batch flushed the service chain:\n%s", after)
		}
		if l := nftIn(t, ns, "list", "map", "ip", "kpng", "no-endpoint-services"); strings.Contains(l, "10.96.0.5 ") {
			t.Errorf("the failed batch added the no-endpoint element:\n%s", l)
		}

		// The retry: a full sync, by nft, to the state a fresh one writes.
		f.sync(backend.Changes{})
		if st := f.b.Last[0]; !st.Full || st.Netlink {
			t.Fatalf("the sync after the failure: %+v, want a full one by nft", st)
		}
		f.clock = f.clock.Add(2 * staleDelay) // the emptied chains go
		f.sync(backend.Changes{})
		sameAsNftWrites(t, ns, f, "the repaired table differs from a fresh one")
	})
}

// sameAsNftWrites fails the test, saying what, unless f's IPv4 table in ns
// is the one a fresh backend writes with the nft command for f's state.
// It deletes the table.
func sameAsNftWrites(t *testing.T, ns *netnstest.Netns, f *fixture, what string) {
	t.Helper()
	got := listTable(t, ns, "ip")
	nftIn(t, ns, "delete", "table", "ip", "kpng")
	ref := realFixtureWith(t, testConfig(), false)
	ref.state = f.state
	ref.sync(backend.Changes{})
	if want := listTable(t, ns, "ip"); got != want {
		t.Errorf("%s:\n%s", what, diffLines(got, want))
	}
}

// TestNetlinkLargeBatch: thousands of services added in one sync make one
// batch of megabytes (beyond the socket's default send buffer), still one
// transaction, still the state nft writes.
func TestNetlinkLargeBatch(t *testing.T) {
	inNetns(t, func(ns *netnstest.Netns) {
		f := realFixture(t)
		f.sync(backend.Changes{})
		f.set(many(3000)...)
		if st := f.b.Last[0]; !st.Netlink || st.Operations < 3000 {
			t.Fatalf("adding 3,000 services: %+v, want one netlink batch", st)
		}
		sameAsNftWrites(t, ns, f, "the table written through netlink differs from nft's")
	})
}
