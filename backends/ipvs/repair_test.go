package ipvs

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// iptablesRendering renders some rules as iptables-save does, unlike the
// script that wrote them: the periodic check must compare saves with
// saves, or it would rewrite intact rules at every sync.
func iptablesRendering(args []string) string {
	s := strings.Join(args, " ")
	s = strings.Replace(s, "-j MARK --or-mark 0x4000", "-j MARK --set-xmark 0x4000/0x4000", 1)
	if strings.HasSuffix(s, "-j REJECT") {
		s += " --reject-with icmp-port-unreachable"
	}
	return s
}

// repairServices are Services whose rendering fills most sets: a node
// port under each policy, an external IP, a load balancer with source
// ranges and a health-check node port, a pod reaching itself.
func repairServices() *backend.State {
	web := service("default", "web", "10.96.0.10", withNodePort(30080),
		withEndpoints(ep("10.244.1.10", 8080, true), ep("10.244.2.10", 8080, false)))
	web.Service.ExternalIps = []string{"192.168.77.200"}
	local := service("default", "local", "10.96.0.11", withNodePort(30081),
		withEndpoints(ep("10.244.1.11", 8080, true)))
	local.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	local.Service.LoadBalancerIps = []string{"203.0.113.7"}
	local.Service.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	local.Service.HealthCheckNodePort = 32000
	return stateOf(web, local)
}

// counts are the kernel's work a sync did beyond IPVS: iptables-save and
// iptables-restore runs, listings of the sets' headers, ipset restores.
type counts struct{ Saves, Restores, SetLists, SetWrites int }

func (k *fakeKernel) counts() counts {
	return counts{Saves: k.saves, Restores: k.restores, SetLists: k.setLists, SetWrites: k.setWrites}
}

func (k *fakeKernel) resetCounts() {
	k.saves, k.restores, k.perJump, k.setLists, k.setWrites = 0, 0, 0, 0, 0
}

// TestPeriodicSyncRepairsRules: every periodic sync (not only the hourly
// full one) checks the family's rules and jumps with one iptables-save,
// and rewrites them, with one iptables-restore (and one more save, for
// the next check), only when they differ from what kpng wrote; IPVS is
// left alone and the sync is no full one.
func TestPeriodicSyncRepairsRules(t *testing.T) {
	flush := func(ipt *fakeIPTables, table string) {
		for k := range ipt.chains {
			if strings.HasPrefix(k, table+" ") {
				ipt.chains[k] = nil
			}
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(ipt *fakeIPTables)
	}{
		{"nat table flushed", func(ipt *fakeIPTables) { flush(ipt, "nat") }},
		{"every table flushed and the chains deleted", func(ipt *fakeIPTables) { *ipt = *newFakeIPTables() }},
		{"one chain flushed", func(ipt *fakeIPTables) { ipt.chains["nat "+chainServices] = nil }},
		{"a jump deleted", func(ipt *fakeIPTables) { ipt.chains["nat PREROUTING"] = nil }},
		{"a rule deleted", func(ipt *fakeIPTables) {
			ipt.chains["filter "+chainFilter] = ipt.chains["filter "+chainFilter][1:]
		}},
		{"a rule changed", func(ipt *fakeIPTables) {
			ipt.chains["nat "+chainMarkMasq] = []string{"-j MARK --or-mark 0x8000"}
		}},
		{"a rule added", func(ipt *fakeIPTables) {
			ipt.chains["filter "+chainFilter] = append(ipt.chains["filter "+chainFilter], "-j ACCEPT")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f, k := newTestBackend(t, testConfig())
			k.render = iptablesRendering
			st := repairServices()
			mustSync(t, b, st, backend.Changes{Reset: true})
			want := k.ipt[false].clone()

			k.resetCounts()
			if got := syncOps(t, b, f, st, backend.Changes{Resync: true}); len(got) != 0 {
				t.Errorf("periodic sync of intact rules: IPVS %q", got)
			}
			if diff := cmp.Diff(counts{Saves: 1, SetLists: 1}, k.counts()); diff != "" {
				t.Errorf("periodic sync of intact rules: one save, one listing of the sets, nothing written (-want +got):\n%s", diff)
			}

			tc.damage(k.ipt[false])
			k.resetCounts()
			if got := syncOps(t, b, f, st, backend.Changes{Resync: true}); len(got) != 0 {
				t.Errorf("periodic sync after the damage: IPVS %q, want nothing", got)
			}
			if diff := cmp.Diff(want.chains, k.ipt[false].chains); diff != "" {
				t.Errorf("iptables after the periodic sync (-before the damage +after):\n%s", diff)
			}
			if diff := cmp.Diff(counts{Saves: 2, Restores: 1, SetLists: 1}, k.counts()); diff != "" {
				t.Errorf("repair: one save, one restore, one save of what it wrote (-want +got):\n%s", diff)
			}
			if b.LastSyncFull() {
				t.Error("a repair of the rules is no full sync")
			}
			if o := b.lastOps(); o.RuleWrites != 1 {
				t.Errorf("ops %+v, want one rule write", o)
			}

			k.resetCounts()
			mustSync(t, b, st, backend.Changes{Resync: true})
			if diff := cmp.Diff(counts{Saves: 1, SetLists: 1}, k.counts()); diff != "" {
				t.Errorf("periodic sync after the repair (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRulesWrittenOnlyWhenTheyDiffer: a full sync, or a node change that
// leaves the rules as they are, writes no rule; a node change that
// changes them (NodeCIDR detection, a new pod CIDR) writes them once; a
// rule another program added to a chain of kpng's is taken out once, and
// a duplicate jump left as it is.
func TestRulesWrittenOnlyWhenTheyDiffer(t *testing.T) {
	cfg := testConfig()
	cfg.DetectLocalMode = "NodeCIDR"
	cfg.ClusterCIDRs = nil
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	b, _, k := newTestBackend(t, cfg)
	k.render = iptablesRendering
	st := repairServices()
	mustSync(t, b, st, backend.Changes{Reset: true})

	k.resetCounts()
	b.lastFull = time.Time{} // the hourly full sync is due
	mustSync(t, b, st, backend.Changes{Resync: true})
	if !b.LastSyncFull() {
		t.Fatal("not a full sync")
	}
	if k.saves != 1 || k.restores != 0 {
		t.Errorf("full sync of intact rules: %d saves, %d restores; want 1, 0", k.saves, k.restores)
	}

	k.resetCounts()
	mustSync(t, b, st, backend.Changes{NodeChanged: true})
	if k.saves != 1 || k.restores != 0 {
		t.Errorf("node change, same rules: %d saves, %d restores; want 1, 0", k.saves, k.restores)
	}
	st.Node.PodCidrs = []string{"10.244.7.0/24"}
	k.resetCounts()
	mustSync(t, b, st, backend.Changes{NodeChanged: true})
	if k.saves != 2 || k.restores != 1 {
		t.Errorf("node change, new pod CIDR: %d saves, %d restores; want 2, 1", k.saves, k.restores)
	}
	if !strings.Contains(string(k.rules[false]), "! -s 10.244.7.0/24 ") {
		t.Errorf("the rules do not follow the pod CIDR:\n%s", k.rules[false])
	}

	// A duplicate jump: written once (nothing is added), then left.
	k.ipt[false].chains["nat PREROUTING"] = append(k.ipt[false].chains["nat PREROUTING"], "-j "+chainServices)
	for i, want := range []int{1, 0} {
		k.resetCounts()
		mustSync(t, b, st, backend.Changes{Resync: true})
		if k.restores != want {
			t.Errorf("periodic sync %d after a duplicate jump: %d restores, want %d", i+1, k.restores, want)
		}
	}
	if n := k.ipt[false].count(jumps[0]); n != 2 {
		t.Errorf("the duplicate jump: %d, want both left", n)
	}
}

// TestPeriodicSyncRepairsIPSets: every periodic sync compares the sets'
// sizes (one listing of their headers, for every family) with the
// record, and refills the sets that differ, and only those, each aside
// and swapped in, in one ipset restore.
func TestPeriodicSyncRepairsIPSets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(sets map[string]map[string]bool)
		want   []string // the sets rewritten
	}{
		{"one set flushed", func(s map[string]map[string]bool) { s["KPNG-CLUSTER-IP"] = map[string]bool{} }, []string{"KPNG-CLUSTER-IP"}},
		{"every set flushed", func(s map[string]map[string]bool) {
			for name := range s {
				s[name] = map[string]bool{}
			}
		}, []string{"KPNG-CLUSTER-IP", "KPNG-EXTERNAL-IP", "KPNG-HEALTH-CHECK-NODE-PORT", "KPNG-IPVS-IPS", "KPNG-LB-SOURCE-CIDR",
			"KPNG-LOAD-BALANCER", "KPNG-LOAD-BALANCER-FW", "KPNG-LOAD-BALANCER-LOCAL", "KPNG-LOOP-BACK", "KPNG-NODE-PORT-LOCAL-TCP", "KPNG-NODE-PORT-TCP"}},
		{"one set destroyed", func(s map[string]map[string]bool) { delete(s, "KPNG-DROP") }, []string{"KPNG-DROP"}},
		{"a member deleted", func(s map[string]map[string]bool) { delete(s["KPNG-NODE-PORT-TCP"], "30080") }, []string{"KPNG-NODE-PORT-TCP"}},
		{"a member added", func(s map[string]map[string]bool) { s["KPNG-IPVS-IPS"]["10.96.9.9"] = true }, []string{"KPNG-IPVS-IPS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f, k := newTestBackend(t, testConfig())
			st := repairServices()
			mustSync(t, b, st, backend.Changes{Reset: true})
			want := map[string][]string{}
			for name := range k.sets {
				want[name] = k.members(name)
			}

			tc.damage(k.sets)
			k.resetCounts()
			k.setScripts = nil
			if got := syncOps(t, b, f, st, backend.Changes{Resync: true}); len(got) != 0 {
				t.Errorf("periodic sync after the damage: IPVS %q, want nothing", got)
			}
			got := map[string][]string{}
			for name := range k.sets {
				got[name] = k.members(name)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ipsets after the periodic sync (-before the damage +after):\n%s", diff)
			}
			if diff := cmp.Diff(counts{Saves: 1, SetLists: 1, SetWrites: 1}, k.counts()); diff != "" {
				t.Errorf("repair: one listing, one ipset restore (-want +got):\n%s", diff)
			}
			var swapped []string
			for _, script := range k.setScripts {
				for _, l := range strings.Split(script, "\n") {
					if s, ok := strings.CutPrefix(l, "swap KPNG-TMP "); ok {
						swapped = append(swapped, s)
					}
				}
			}
			slices.Sort(swapped)
			if diff := cmp.Diff(tc.want, swapped); diff != "" {
				t.Errorf("sets rewritten (-want +got):\n%s", diff)
			}
			if b.LastSyncFull() {
				t.Error("a repair of the sets is no full sync")
			}

			k.resetCounts()
			mustSync(t, b, st, backend.Changes{Resync: true})
			if diff := cmp.Diff(counts{Saves: 1, SetLists: 1}, k.counts()); diff != "" {
				t.Errorf("periodic sync after the repair (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOneCheckForBothFamilies: a periodic sync of both families lists the
// sets once, and saves each family's iptables once.
func TestOneCheckForBothFamilies(t *testing.T) {
	cfg := testConfig()
	cfg.IPFamilies = []string{"ipv4", "ipv6"}
	b, _, k := newTestBackend(t, cfg)
	st := repairServices()
	v6 := service("default", "web6", "fd00::10", withEndpoints(ep("fd00:244:1::10", 8080, true)))
	v6.Service.Family = localv1.IPFamily_IPV6
	st.Services[key(v6)] = v6
	mustSync(t, b, st, backend.Changes{Reset: true})

	k.resetCounts()
	mustSync(t, b, st, backend.Changes{Resync: true})
	if diff := cmp.Diff(counts{Saves: 2, SetLists: 1}, k.counts()); diff != "" {
		t.Errorf("periodic sync of both families (-want +got):\n%s", diff)
	}
	// The IPv6 family's set flushed: only it is rewritten.
	k.sets["KPNG-6-CLUSTER-IP"] = map[string]bool{}
	k.resetCounts()
	k.setScripts = nil
	mustSync(t, b, st, backend.Changes{Resync: true})
	if len(k.setScripts) != 1 || !strings.Contains(k.setScripts[0], "swap KPNG-6-TMP KPNG-6-CLUSTER-IP\n") || strings.Contains(k.setScripts[0], "swap KPNG-TMP ") {
		t.Errorf("ipset restores: %q, want one that rewrites KPNG-6-CLUSTER-IP", k.setScripts)
	}
	if got := k.members("KPNG-6-CLUSTER-IP"); !slices.Equal(got, []string{"fd00::10,tcp:80"}) {
		t.Errorf("KPNG-6-CLUSTER-IP: %q", got)
	}
}

func TestParseIPSetHeaders(t *testing.T) {
	// ipset v7.17's `ipset list -t`; an older ipset says no size.
	out := `Name: KPNG-CLUSTER-IP
Type: hash:ip,port
Revision: 7
Header: family inet hashsize 1024 maxelem 1048576 bucketsize 12 initval 0x96cdca1e
Size in memory: 264
References: 2
Number of entries: 3

Name: KPNG-NODE-PORT-TCP
Type: bitmap:port
Revision: 3
Header: range 0-65535
Size in memory: 8264
References: 1
Number of entries: 0

Name: OLD
Type: hash:ip
`
	want := map[string]int{"KPNG-CLUSTER-IP": 3, "KPNG-NODE-PORT-TCP": 0, "OLD": -1}
	if diff := cmp.Diff(want, parseIPSetHeaders([]byte(out))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A size ipset does not tell is not a damage; a missing set is.
	if got := damagedSets(false, nil, map[string]int{"KPNG-CLUSTER-IP": -1}); slices.Contains(got, setClusterIP) || !slices.Contains(got, setDrop) {
		t.Errorf("damaged: %q", got)
	}
}

func TestRuleDrift(t *testing.T) {
	want := "*nat :KPNG-IPVS-SERVICES\n*nat -A PREROUTING -j KPNG-IPVS-SERVICES\n*nat -A KPNG-IPVS-SERVICES -j ACCEPT\n"
	for _, tc := range []struct{ got, drift string }{
		{"*nat :KPNG-IPVS-SERVICES\n", `2 rules or chains missing (*nat -A PREROUTING -j KPNG-IPVS-SERVICES, ...)`},
		{want + "*nat -A KPNG-IPVS-SERVICES -j DROP\n", `1 rules or chains unknown (*nat -A KPNG-IPVS-SERVICES -j DROP, ...)`},
		{"*nat :KPNG-IPVS-SERVICES\n*nat -A KPNG-IPVS-SERVICES -j ACCEPT\n*nat -A PREROUTING -j KPNG-IPVS-SERVICES\n", "rules reordered"},
	} {
		if got := ruleDrift(want, tc.got); got != tc.drift {
			t.Errorf("ruleDrift(%q) = %q, want %q", tc.got, got, tc.drift)
		}
	}
}
