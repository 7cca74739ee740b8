//go:build e2e

package ipvs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// processCounter counts the iptables processes started from now on in
// the test: each iptables program is found, through PATH, as a script that
// logs a line and runs the real one.
type processCounter struct {
	log   string
	start int
}

func countProcesses(t *testing.T) *processCounter {
	t.Helper()
	dir := t.TempDir()
	c := &processCounter{log: filepath.Join(dir, "log")}
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		real, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf("#!/bin/sh\necho %s >>%s\nexec %s \"$@\"\n", name, c.log, real)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return c
}

// since is the number of processes started since the last call.
func (c *processCounter) since(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(c.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := strings.Count(string(b), "\n")
	defer func() { c.start = n }()
	return n - c.start
}

// checkJumps asks iptables -C (which compares by meaning, not by
// rendering) whether each jump exists.
func checkJumps(ctx context.Context, ipv6 bool) (present []bool) {
	for _, j := range jumps {
		argv := jumpArgv(ipv6, "-C", j)
		present = append(present, exec.CommandContext(ctx, argv[0], argv[1:]...).Run() == nil)
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
	c := countProcesses(t)
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", ipv6), func(t *testing.T) {
			err := ns.Do(func() error {
				testJumpsInNamespace(t, c, ipv6)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func testJumpsInNamespace(t *testing.T, c *processCounter, ipv6 bool) {
	ctx := t.Context()
	k := &hostKernel{}
	if err := k.ipsetRestore(ctx, fullSetScript(ipv6, nil, nil)); err != nil {
		t.Fatal(err)
	}
	rules := rulesScript(ruleConfig{ipv6: ipv6, mark: 0x4000})
	want := slices.Repeat([]bool{true}, len(jumps))
	// measure logs the iptables processes and the time of step, one of
	// the per-jump path's (before) or the save-and-restore one's (after).
	measure := func(what string, step func() error) int {
		t.Helper()
		c.since(t)
		start := time.Now()
		if err := step(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		took := time.Since(start)
		n := c.since(t)
		t.Logf("%s: %d iptables processes, %v", what, n, took.Round(time.Millisecond))
		return n
	}

	// The per-jump path, for the order it gives the jumps and its cost.
	measure("per jump: rules, then each jump checked and inserted", func() error {
		return writeRulesPerJump(ctx, k, ipv6, rules)
	})
	perJumpOrder := builtinRules(t, ctx, k, ipv6)
	s := parseJumps(mustSave(t, k, ipv6))
	if s.unknown != "" || !slices.Equal(s.counts, slices.Repeat([]int{1}, len(jumps))) {
		t.Fatalf("iptables-save's rendering of the jumps as iptables -I wrote them: counts %v, unknown %q", s.counts, s.unknown)
	}
	measure("per jump: cleanup, each jump checked and deleted, then the chains", func() error {
		return cleanupPerJump(ctx, k, ipv6)
	})

	// Nothing present: one save, one restore, every jump in, in the
	// per-jump path's order.
	if n := measure("save and restore: rules and every jump", func() error {
		return writeRulesAndJumps(ctx, k, ipv6, rules, mustSave(t, k, ipv6))
	}); n != 2 {
		t.Errorf("%d iptables processes, want 2", n)
	}
	if got := checkJumps(ctx, ipv6); !slices.Equal(got, want) {
		t.Errorf("iptables -C after writing: %v", got)
	}
	if got := builtinRules(t, ctx, k, ipv6); !slices.Equal(got, perJumpOrder) {
		t.Errorf("the built-in chains' rules:\n%s\nwant, as iptables -I gave them:\n%s", strings.Join(got, "\n"), strings.Join(perJumpOrder, "\n"))
	}

	// Some missing, one duplicated: the missing one back, the duplicate
	// left.
	for _, argv := range [][]string{jumpArgv(ipv6, "-D", jumps[3]), jumpArgv(ipv6, "-A", jumps[8])} {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	c.since(t)
	if err := writeRulesAndJumps(ctx, k, ipv6, rules, mustSave(t, k, ipv6)); err != nil {
		t.Fatal(err)
	}
	if n := c.since(t); n != 2 {
		t.Errorf("writing again: %d iptables processes, want 2", n)
	}
	if got := checkJumps(ctx, ipv6); !slices.Equal(got, want) {
		t.Errorf("iptables -C after writing again: %v", got)
	}
	if s := parseJumps(mustSave(t, k, ipv6)); s.counts[3] != 1 || s.counts[8] != 2 {
		t.Errorf("counts %v: want jumps[3] once, jumps[8] twice", s.counts)
	}

	// Cleanup: every occurrence and every chain gone in one restore.
	if n := measure("save and restore: cleanup", func() error {
		return cleanupIPTables(ctx, k, ipv6)
	}); n != 2 {
		t.Errorf("cleanup: %d iptables processes, want 2", n)
	}
	if save := string(mustSave(t, k, ipv6)); strings.Contains(save, chainPrefix) {
		t.Errorf("after cleanup:\n%s", save)
	}
	// Nothing left: no restore.
	c.since(t)
	if err := cleanupIPTables(ctx, k, ipv6); err != nil {
		t.Fatal(err)
	}
	if n := c.since(t); n != 1 {
		t.Errorf("cleanup of nothing: %d iptables processes, want 1", n)
	}
	existing, err := k.ipsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.ipsetRestore(ctx, destroyScript(ipv6, existing)); err != nil {
		t.Fatal(err)
	}
}
