package ipvs

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// The iptables rules and the ipsets are checked at every periodic sync
// (--sync-period), as kube-proxy's ipvs mode rewrites its rules at every
// sync: neither sends a notification of a change, and a nat table flushed
// by an admin would otherwise leave the services unmasqueraded until the
// next full sync (--full-sync-period). The check costs the same whatever
// the number of services: per family, one iptables-save compared with
// what kpng's last write left, and one `ipset list -t` (the sets' headers,
// with their sizes, for both families) compared with the record's member
// counts. A write follows only when something differs: one
// iptables-restore, one ipset restore of the sets that differ.

// ruleRecord is what the backend's last write of a family's rules left:
// the script written and iptables-save's rendering of the result
// (ownRules). The check compares saves with saves, not with the script:
// iptables renders rules its own way (`--or-mark` as `--set-xmark`, a
// REJECT with its default), which differs between versions.
type ruleRecord struct {
	script []byte
	saved  string
}

// ownRules is the part of an iptables-save output that is the backend's,
// table by table in the save's order: its chains (by name: the counters
// change), their rules, and the rules of other chains that enter them
// (the jumps, with their duplicates and renderings that are no jump's).
// Two saves with equal ownRules hold the same rules of the backend's.
func ownRules(save []byte) string {
	var b strings.Builder
	walkSave(save, func(table, name string) {
		fmt.Fprintf(&b, "*%s :%s\n", table, name)
	}, func(table, chain, args, line string) {
		if strings.HasPrefix(chain, chainPrefix) || entersOurs(args) {
			fmt.Fprintf(&b, "*%s %s\n", table, line)
		}
	})
	return b.String()
}

// ruleDrift says how the backend's rules in iptables (got, ownRules)
// differ from what its last write left (want), for the log.
func ruleDrift(want, got string) string {
	missing, firstMissing := excess(want, got)
	unknown, firstUnknown := excess(got, want)
	switch {
	case missing > 0 && unknown > 0:
		return fmt.Sprintf("%d rules or chains missing (%s, ...), %d unknown (%s, ...)", missing, firstMissing, unknown, firstUnknown)
	case missing > 0:
		return fmt.Sprintf("%d rules or chains missing (%s, ...)", missing, firstMissing)
	case unknown > 0:
		return fmt.Sprintf("%d rules or chains unknown (%s, ...)", unknown, firstUnknown)
	}
	return "rules reordered"
}

// excess counts the lines of a that b lacks (each as often as a has it
// more than b), and returns the first of them.
func excess(a, b string) (int, string) {
	inB := map[string]int{}
	for _, l := range strings.Split(b, "\n") {
		inB[l]++
	}
	n, first := 0, ""
	for _, l := range strings.Split(a, "\n") {
		if l == "" {
			continue
		}
		if inB[l] > 0 {
			inB[l]--
			continue
		}
		if n++; first == "" {
			first = l
		}
	}
	return n, first
}

// ensureRules makes the family's rules and jumps those of script: one
// iptables-save, compared with what the last write left; when it differs,
// or script is not what was last written, one iptables-restore (the
// rules and the missing jumps: writeRulesAndJumps) and one more
// iptables-save, whose rendering the next check compares with.
func (p *proxier) ensureRules(ctx context.Context, script []byte) error {
	save, err := p.kern.iptablesSave(ctx, p.ipv6)
	if err != nil {
		return err
	}
	cur := ownRules(save)
	same := p.rules.script != nil && bytes.Equal(script, p.rules.script)
	if same && cur == p.rules.saved {
		return nil
	}
	if same {
		klog.FromContext(ctx).Info("iptables rules changed behind kpng's back, rewriting them", "family", p.family, "what", ruleDrift(p.rules.saved, cur))
	}
	p.rules = ruleRecord{}
	p.ops.RuleWrites++
	if err := writeRulesAndJumps(ctx, p.kern, p.ipv6, script, save); err != nil {
		return err
	}
	after, err := p.kern.iptablesSave(ctx, p.ipv6)
	if err != nil {
		return err
	}
	p.rules = ruleRecord{script: script, saved: ownRules(after)}
	return nil
}

// damagedSets lists the family's sets (base names) whose size in the
// kernel (sizes, by kernel name, from the sets' headers; -1 when the
// header did not tell) is not the number of members entries holds for
// them, missing sets included: flushed, or members added or deleted
// behind kpng's back.
func damagedSets(ipv6 bool, entries map[setEntry]int, sizes map[string]int) []string {
	want := map[string]int{}
	for e := range entries {
		want[e.Set]++
	}
	var out []string
	for _, base := range sortedKeys(setTypes) {
		n, ok := sizes[setName(base, ipv6)]
		if !ok || (n >= 0 && n != want[base]) {
			out = append(out, base)
		}
	}
	return out
}

// repairSets rewrites the family's sets whose size is not the record's,
// each filled aside and swapped in (one ipset restore, none when all
// agree). sizes lists the sets' sizes (one listing for both families).
func (p *proxier) repairSets(ctx context.Context, sizes func() (map[string]int, error)) error {
	m, err := sizes()
	if err != nil {
		return err
	}
	damaged := damagedSets(p.ipv6, p.entryRefs, m)
	if len(damaged) == 0 {
		return nil
	}
	klog.FromContext(ctx).Info("ipsets changed behind kpng's back, rewriting them", "family", p.family, "sets", damaged)
	existing := map[string]bool{}
	for name := range m {
		existing[name] = true
	}
	for e := range p.entryRefs {
		if slices.Contains(damaged, e.Set) {
			p.ops.SetEntries++
		}
	}
	return p.kern.ipsetRestore(ctx, setsScript(p.ipv6, p.entryRefs, existing, damaged))
}
