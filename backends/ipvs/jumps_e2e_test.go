//go:build e2e

package ipvs

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// The jumps against real iptables in a namespace of the test's own. They
// need no IPVS, only iptables and ipset; TestMain still takes this package's
// kernel tests to the VM. On a host without IPVS, run them there by hand:
//
//	go test -c -tags e2e -o /tmp/ipvs.test ./backends/ipvs
//	KPNG_IPVS_TEST_IN_VM=1 /tmp/ipvs.test -test.run 'TestJumps' -test.v

// countingKernel counts the iptables processes hostKernel starts.
type countingKernel struct {
	hostKernel
	saves, restores, perJump int
}

func (k *countingKernel) iptablesSave(ctx context.Context, ipv6 bool) ([]byte, error) {
	k.saves++
	return k.hostKernel.iptablesSave(ctx, ipv6)
}

func (k *countingKernel) iptablesRestore(ctx context.Context, ipv6 bool, script []byte) error {
	k.restores++
	return k.hostKernel.iptablesRestore(ctx, ipv6, script)
}

// ensureJump and deleteJump are counted as calls, each at least one
// process.
func (k *countingKernel) ensureJump(ctx context.Context, ipv6 bool, j jump) error {
	k.perJump++
	return k.hostKernel.ensureJump(ctx, ipv6, j)
}

func (k *countingKernel) deleteJump(ctx context.Context, ipv6 bool, j jump) error {
	k.perJump++
	return k.hostKernel.deleteJump(ctx, ipv6, j)
}

func (k *countingKernel) reset() { k.saves, k.restores, k.perJump = 0, 0, 0 }

// checkJumps asks iptables -C (which compares by meaning, not by
// rendering) whether each jump exists.
func checkJumps(ctx context.Context, ipv6 bool) (present []bool) {
	for _, j := range jumps {
		present = append(present, exec.CommandContext(ctx, jumpArgv(ipv6, "-C", j)[0], jumpArgv(ipv6, "-C", j)[1:]...).Run() == nil)
	}
	return present
}

// builtinRules is iptables-save's output cut to the rules of the built-in
// chains the jumps enter.
func builtinRules(t *testing.T, ctx context.Context, k kernel, ipv6 bool) []string {
	t.Helper()
	save, err := k.iptablesSave(ctx, ipv6)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	table := ""
	for _, l := range strings.Split(string(save), "\n") {
		if strings.HasPrefix(l, "*") {
			table = l
		}
		if strings.HasPrefix(l, "-A ") && !strings.HasPrefix(l, "-A "+chainPrefix) {
			out = append(out, table+" "+l)
		}
	}
	return out
}

func TestJumpsAgainstIPTablesSave(t *testing.T) {
	ns := netnstest.New(t, "jumps")
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", ipv6), func(t *testing.T) {
			err := ns.Do(func() error {
				testJumpsInNamespace(t, ipv6)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func testJumpsInNamespace(t *testing.T, ipv6 bool) {
	ctx := t.Context()
	k := &countingKernel{}
	if err := k.ipsetRestore(ctx, fullSetScript(ipv6, nil, nil)); err != nil {
		t.Fatal(err)
	}
	rules := rulesScript(ruleConfig{ipv6: ipv6, mark: 0x4000})
	want := slices.Repeat([]bool{true}, len(jumps))

	// The per-jump path, for the order it gives the jumps.
	if err := k.iptablesRestore(ctx, ipv6, rules); err != nil {
		t.Fatal(err)
	}
	for _, j := range jumps {
		if err := k.hostKernel.ensureJump(ctx, ipv6, j); err != nil {
			t.Fatal(err)
		}
	}
	perJumpOrder := builtinRules(t, ctx, k, ipv6)
	s := parseJumps(mustSave(t, k, ipv6))
	if s.unknown != "" || !slices.Equal(s.counts, slices.Repeat([]int{1}, len(jumps))) {
		t.Fatalf("iptables-save's rendering of the jumps as iptables -I wrote them: counts %v, unknown %q", s.counts, s.unknown)
	}
	if err := cleanupIPTables(ctx, k, ipv6); err != nil {
		t.Fatal(err)
	}

	// Nothing present: one save, one restore, every jump in, in the
	// per-jump path's order.
	k.reset()
	start := time.Now()
	if err := writeRulesAndJumps(ctx, k, ipv6, rules); err != nil {
		t.Fatal(err)
	}
	t.Logf("rules and jumps written in %v", time.Since(start))
	if got := [3]int{k.saves, k.restores, k.perJump}; got != [3]int{1, 1, 0} {
		t.Errorf("saves, restores, per-jump calls: %v, want [1 1 0]", got)
	}
	if got := checkJumps(ctx, ipv6); !slices.Equal(got, want) {
		t.Errorf("iptables -C after writing: %v", got)
	}
	if got := builtinRules(t, ctx, k, ipv6); !slices.Equal(got, perJumpOrder) {
		t.Errorf("the built-in chains' rules:\n%s\nwant, as iptables -I gave them:\n%s", strings.Join(got, "\n"), strings.Join(perJumpOrder, "\n"))
	}

	// Some missing, one duplicated: the missing one back, the duplicate
	// left; nothing when all are present.
	for _, argv := range [][]string{jumpArgv(ipv6, "-D", jumps[3]), jumpArgv(ipv6, "-A", jumps[8])} {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	k.reset()
	if err := writeRulesAndJumps(ctx, k, ipv6, rules); err != nil {
		t.Fatal(err)
	}
	if got := [3]int{k.saves, k.restores, k.perJump}; got != [3]int{1, 1, 0} {
		t.Errorf("again: saves, restores, per-jump calls: %v, want [1 1 0]", got)
	}
	if got := checkJumps(ctx, ipv6); !slices.Equal(got, want) {
		t.Errorf("iptables -C after writing again: %v", got)
	}
	if s := parseJumps(mustSave(t, k, ipv6)); s.counts[3] != 1 || s.counts[8] != 2 {
		t.Errorf("counts %v: want jumps[3] once, jumps[8] twice", s.counts)
	}

	// Cleanup: every occurrence and every chain gone in one restore.
	k.reset()
	start = time.Now()
	if err := cleanupIPTables(ctx, k, ipv6); err != nil {
		t.Fatal(err)
	}
	t.Logf("jumps and chains removed in %v", time.Since(start))
	if got := [3]int{k.saves, k.restores, k.perJump}; got != [3]int{1, 1, 0} {
		t.Errorf("cleanup: saves, restores, per-jump calls: %v, want [1 1 0]", got)
	}
	if save := string(mustSave(t, k, ipv6)); strings.Contains(save, chainPrefix) {
		t.Errorf("after cleanup:\n%s", save)
	}
	// Nothing left: no restore.
	k.reset()
	if err := cleanupIPTables(ctx, k, ipv6); err != nil {
		t.Fatal(err)
	}
	if got := [3]int{k.saves, k.restores, k.perJump}; got != [3]int{1, 0, 0} {
		t.Errorf("cleanup of nothing: saves, restores, per-jump calls: %v, want [1 0 0]", got)
	}
	existing, err := k.ipsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.ipsetRestore(ctx, destroyScript(ipv6, existing)); err != nil {
		t.Fatal(err)
	}
}

func mustSave(t *testing.T, k kernel, ipv6 bool) []byte {
	t.Helper()
	save, err := k.iptablesSave(t.Context(), ipv6)
	if err != nil {
		t.Fatal(err)
	}
	return save
}
