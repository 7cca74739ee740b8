//go:build e2e

package ipvs

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/proxyutil/host"
)

// TestRepairAgainstRealIPTables: the periodic check of the rules and the
// sets (repair.go) against real iptables and ipset, in a namespace of the
// test's own, both families. iptables' rendering of what kpng wrote is
// stable, so intact rules cost one iptables-save and nothing is rewritten;
// each damage an admin may do is seen, and repaired by one restore. Like
// the jumps' test it needs no IPVS: on a host without it,
//
//	KPNG_IPVS_TEST_IN_VM=1 /tmp/ipvs.test -test.run 'TestRepairAgainst' -test.v
func TestRepairAgainstRealIPTables(t *testing.T) {
	ns := netnstest.New(t, "repair")
	c := countProcesses(t)
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", ipv6), func(t *testing.T) {
			err := ns.Do(func() error {
				testRepairInNamespace(t, c, ipv6)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func testRepairInNamespace(t *testing.T, c *processCounter, ipv6 bool) {
	ctx := t.Context()
	k := &hostKernel{}
	p := newProxier(ipv6, testConfig(), NewFake(), k)
	vip, cidr := netip.MustParseAddr("10.96.0.10"), netip.MustParsePrefix("10.244.0.0/16")
	if ipv6 {
		vip, cidr = netip.MustParseAddr("fd00:96::10"), netip.MustParsePrefix("fd00:244::/48")
	}
	p.entryRefs = map[setEntry]int{
		{Set: setClusterIP, Entry: vip.String() + ",tcp:80"}: 1,
		{Set: setIPVSIPs, Entry: vip.String()}:               1,
		{Set: nodePortSet("tcp", false), Entry: "30080"}:     1,
	}
	existing, err := k.ipsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.ipsetRestore(ctx, fullSetScript(ipv6, p.entryRefs, existing)); err != nil {
		t.Fatal(err)
	}
	script := rulesScript(ruleConfig{ipv6: ipv6, mark: 0x4000, local: host.LocalTraffic{CIDR: cidr}, dropInvalid: true})

	// ensure runs the check and returns the iptables processes it ran.
	ensure := func(what string) int {
		t.Helper()
		c.since(t)
		p.ops = opCounts{}
		start := time.Now()
		if err := p.ensureRules(ctx, script); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n := c.since(t)
		t.Logf("%s: %d iptables processes, %v", what, n, time.Since(start).Round(time.Millisecond))
		return n
	}
	if n := ensure("first write"); n != 3 {
		t.Errorf("first write: %d iptables processes, want 3 (save, restore, save)", n)
	}
	want := ownRules(mustSave(t, k, ipv6))
	if !strings.Contains(want, chainServices) || !strings.Contains(want, "-A PREROUTING -j "+chainServices) {
		t.Fatalf("the backend's rules in iptables-save:\n%s", want)
	}
	for i := range 3 {
		if n := ensure("intact"); n != 1 || p.ops.RuleWrites != 0 {
			t.Errorf("check %d of intact rules: %d iptables processes, %d writes; want 1, 0 (iptables rendered them another way?)", i+1, n, p.ops.RuleWrites)
		}
	}

	cmd := "iptables"
	if ipv6 {
		cmd = "ip6tables"
	}
	for _, d := range []struct {
		name string
		argv [][]string
	}{
		{"nat table flushed", [][]string{{"-t", "nat", "-F"}}},
		{"one chain flushed", [][]string{{"-t", "filter", "-F", chainFilter}}},
		{"a jump deleted", [][]string{{"-t", "nat", "-D", "PREROUTING", "-j", chainServices}}},
		{"a rule deleted", [][]string{{"-t", "nat", "-D", chainMarkMasq, "1"}}},
		{"a rule added", [][]string{{"-t", "filter", "-A", chainFilter, "-j", "ACCEPT"}}},
		{"everything flushed and deleted", [][]string{
			{"-t", "nat", "-F"}, {"-t", "nat", "-X"}, {"-t", "filter", "-F"}, {"-t", "filter", "-X"}, {"-t", "mangle", "-F"}, {"-t", "mangle", "-X"},
		}},
	} {
		for _, argv := range d.argv {
			argv = append([]string{cmd, "-w", "5"}, argv...)
			if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
			}
		}
		if ownRules(mustSave(t, k, ipv6)) == want {
			t.Fatalf("%s: no rule of the backend's changed", d.name)
		}
		if n := ensure(d.name); n != 3 || p.ops.RuleWrites != 1 {
			t.Errorf("%s: %d iptables processes, %d writes; want 3, 1", d.name, n, p.ops.RuleWrites)
		}
		if got := ownRules(mustSave(t, k, ipv6)); got != want {
			t.Errorf("%s: after the repair:\n%s\nwant:\n%s", d.name, got, want)
		}
		if n := ensure(d.name + ", then intact"); n != 1 {
			t.Errorf("%s: the next check ran %d iptables processes, want 1", d.name, n)
		}
	}

	// A set flushed: its size tells, and it alone is refilled.
	clusterIP := setName(setClusterIP, ipv6)
	if out, err := exec.CommandContext(ctx, "ipset", "flush", clusterIP).CombinedOutput(); err != nil {
		t.Fatalf("ipset flush: %v: %s", err, out)
	}
	start := time.Now()
	sizes, err := k.ipsetSizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ipset list -t: %v", time.Since(start).Round(time.Millisecond))
	if got := damagedSets(ipv6, p.entryRefs, sizes); !slices.Equal(got, []string{setClusterIP}) {
		t.Errorf("damaged sets %q (sizes %v), want only %s", got, sizes, setClusterIP)
	}
	if err := p.repairSets(ctx, func() (map[string]int, error) { return k.ipsetSizes(ctx) }); err != nil {
		t.Fatal(err)
	}
	if sizes, err = k.ipsetSizes(ctx); err != nil {
		t.Fatal(err)
	}
	if got := damagedSets(ipv6, p.entryRefs, sizes); len(got) != 0 {
		t.Errorf("after the repair, damaged sets %q (sizes %v)", got, sizes)
	}
	out, err := exec.CommandContext(ctx, "ipset", "list", clusterIP).Output()
	if err != nil || !strings.Contains(string(out), "\n"+vip.String()+",tcp:80") {
		t.Errorf("ipset list %s after the repair: %v\n%s", clusterIP, err, out)
	}

	if err := cleanupIPTables(ctx, k, ipv6); err != nil {
		t.Fatal(err)
	}
	if existing, err = k.ipsets(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.ipsetRestore(ctx, destroyScript(ipv6, existing)); err != nil {
		t.Fatal(err)
	}
}
