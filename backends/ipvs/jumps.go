package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/klog/v2"
)

// The jumps are checked and written from one iptables-save and one
// iptables-restore --noflush per family, not one iptables process per jump:
// under software emulation each process start costs about a second, and
// `kpng --cleanup` ran some 50 of them. iptables -C compares rules by
// meaning, iptables-save's text by rendering: where the two could
// disagree (a rule that enters one of the backend's chains but is no jump's
// rendering) or the restore fails, the per-jump path decides.

// chainPrefix starts the names of the backend's chains.
const chainPrefix = "KPNG-IPVS-"

// savedJumps is what one iptables-save says of the jumps.
type savedJumps struct {
	// counts is how many rules of each jump (by index in jumps) exist.
	counts []int
	// chains reports whether any of the backend's chains exists.
	chains bool
	// unknown is a rule that enters one of the backend's chains from
	// outside them but renders as no jump does ("" when none).
	unknown string
}

// parseJumps reads iptables-save's output: iptables-save renders a rule
// as "-A CHAIN <args>", which is compared with a jump's args joined by
// spaces, in the jump's table.
func parseJumps(save []byte) savedJumps {
	s := savedJumps{counts: make([]int, len(jumps))}
	walkSave(save, func(string, string) { s.chains = true }, func(table, chain, args, line string) {
		if strings.HasPrefix(chain, chainPrefix) {
			return
		}
		found := false
		for i, j := range jumps {
			if j.table == table && j.chain == chain && strings.Join(j.args, " ") == args {
				s.counts[i]++
				found = true
			}
		}
		if !found && s.unknown == "" && entersOurs(args) {
			s.unknown = "*" + table + " " + line
		}
	})
	return s
}

// walkSave reads iptables-save's output line by line: ownChain is called
// for each declaration of one of the backend's chains, rule for each rule
// ("-A CHAIN <args>"), both with the table they are in.
func walkSave(save []byte, ownChain func(table, name string), rule func(table, chain, args, line string)) {
	table := ""
	for _, line := range strings.Split(string(save), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, ":"+chainPrefix):
			name, _, _ := strings.Cut(line[1:], " ")
			ownChain(table, name)
		case strings.HasPrefix(line, "-A "):
			chain, args, _ := strings.Cut(line[len("-A "):], " ")
			rule(table, chain, args, line)
		}
	}
}

// entersOurs reports whether a rule's args jump or go to one of the
// backend's chains.
func entersOurs(args string) bool {
	f := strings.Fields(args)
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-j" || f[i] == "-g" || f[i] == "--jump" || f[i] == "--goto") && strings.HasPrefix(f[i+1], chainPrefix) {
			return true
		}
	}
	return false
}

// readJumps runs iptables-save and parses it; an error says why the
// per-jump path must decide instead.
func readJumps(ctx context.Context, k kernel, ipv6 bool) (savedJumps, error) {
	save, err := k.iptablesSave(ctx, ipv6)
	if err != nil {
		return savedJumps{}, err
	}
	return jumpsIn(save)
}

// jumpsIn parses an iptables-save output; an error says why the per-jump
// path must decide instead.
func jumpsIn(save []byte) (savedJumps, error) {
	s := parseJumps(save)
	if s.unknown != "" {
		return s, fmt.Errorf("a rule enters the backend's chains but is no jump's rendering: %s", s.unknown)
	}
	return s, nil
}

// ensureJumpsScript inserts the missing jumps at the head of their chains,
// in jumps' order (as one `iptables -I` each would); nil when none is
// missing.
func ensureJumpsScript(s savedJumps) []byte {
	var b bytes.Buffer
	for _, t := range chains {
		var lines []string
		for i, j := range jumps {
			if j.table == t.table && s.counts[i] == 0 {
				lines = append(lines, fmt.Sprintf("-I %s %s\n", j.chain, strings.Join(j.args, " ")))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "*%s\n%sCOMMIT\n", t.table, strings.Join(lines, ""))
		}
	}
	return b.Bytes()
}

// cleanupScript deletes every occurrence of every jump, then empties and
// deletes the backend's chains. Each table's jumps and chains go in one
// section, committed at once: a chain is deleted only with every jump into
// it (the kernel refuses to delete a chain still referenced).
func cleanupScript(s savedJumps) []byte {
	var b bytes.Buffer
	for _, t := range chains {
		fmt.Fprintf(&b, "*%s\n", t.table)
		for i, j := range jumps {
			if j.table != t.table || s.counts == nil {
				continue
			}
			for range s.counts[i] {
				fmt.Fprintf(&b, "-D %s %s\n", j.chain, strings.Join(j.args, " "))
			}
		}
		// Declaring a chain empties it; then it can go.
		for _, ch := range t.chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", ch)
		}
		for _, ch := range t.chains {
			fmt.Fprintf(&b, "-X %s\n", ch)
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// writeRulesAndJumps writes rules (rulesScript's output) and the jumps
// missing from save (the family's iptables-save output, which the caller
// took) in one iptables-restore. If the jumps cannot be told from the
// save, or that restore fails, it writes rules alone and checks each jump
// with iptables -C, adding it with -I.
func writeRulesAndJumps(ctx context.Context, k kernel, ipv6 bool, rules, save []byte) error {
	s, err := jumpsIn(save)
	if err == nil {
		script := append(rules[:len(rules):len(rules)], ensureJumpsScript(s)...)
		if err = k.iptablesRestore(ctx, ipv6, script); err == nil {
			return nil
		}
	}
	klog.FromContext(ctx).Info("Checking the iptables jumps one by one", "ipv6", ipv6, "reason", err)
	return writeRulesPerJump(ctx, k, ipv6, rules)
}

// writeRulesPerJump writes rules, then checks each jump with iptables -C
// and adds the missing ones with -I.
func writeRulesPerJump(ctx context.Context, k kernel, ipv6 bool, rules []byte) error {
	if err := k.iptablesRestore(ctx, ipv6, rules); err != nil {
		return err
	}
	for _, j := range jumps {
		if err := k.ensureJump(ctx, ipv6, j); err != nil {
			return err
		}
	}
	return nil
}

// cleanupIPTables removes the family's jumps and chains: one iptables-save,
// then one iptables-restore when any of them exists. If the jumps cannot
// be told from the save, or that restore fails, it deletes each jump with
// iptables -D, then the chains.
func cleanupIPTables(ctx context.Context, k kernel, ipv6 bool) error {
	s, err := readJumps(ctx, k, ipv6)
	if err == nil {
		if !s.chains && !hasAny(s.counts) {
			return nil
		}
		if err = k.iptablesRestore(ctx, ipv6, cleanupScript(s)); err == nil {
			return nil
		}
	}
	klog.FromContext(ctx).Info("Deleting the iptables jumps one by one", "ipv6", ipv6, "reason", err)
	return cleanupPerJump(ctx, k, ipv6)
}

// cleanupPerJump deletes each jump with iptables -C and -D, then, when
// all are gone, the chains.
func cleanupPerJump(ctx context.Context, k kernel, ipv6 bool) error {
	var errs []error
	for _, j := range jumps {
		if err := k.deleteJump(ctx, ipv6, j); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// A chain a jump still enters stays.
		return errors.Join(errs...)
	}
	return k.iptablesRestore(ctx, ipv6, cleanupScript(savedJumps{}))
}

func hasAny(counts []int) bool {
	for _, c := range counts {
		if c > 0 {
			return true
		}
	}
	return false
}
