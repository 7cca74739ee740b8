package iptables

import (
	"bufio"
	"bytes"
	"strings"
)

// table is what iptables-save says about one table: its chains, and the
// rules ("-A CHAIN ..." lines) of the chains kpng does not own, where its
// jumps are. The rules of kpng's own chains are not kept: at 10,000
// services they are 330,000 lines that no caller reads.
type table struct {
	chains map[string]bool
	rules  []string
}

// parseSave reads iptables-save output into tables by name. It is lenient:
// lines it does not know are skipped, as iptables-save adds comments and
// warnings.
func parseSave(data []byte) map[string]*table {
	out := map[string]*table{}
	var cur *table
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "*"):
			cur = &table{chains: map[string]bool{}}
			out[strings.TrimSpace(l[1:])] = cur
		case cur == nil:
		case strings.HasPrefix(l, ":"):
			if f := strings.Fields(l[1:]); len(f) > 0 {
				cur.chains[f[0]] = true
			}
		case strings.HasPrefix(l, "-A "):
			if !strings.HasPrefix(l[len("-A "):], chainPrefix) {
				cur.rules = append(cur.rules, l)
			}
		case l == "COMMIT":
			cur = nil
		}
	}
	return out
}

// ruleChain returns the chain of a "-A CHAIN ..." rule and its jump target
// ("" if none).
func ruleChain(rule string) (chain, target string) {
	f := strings.Fields(rule)
	if len(f) >= 2 {
		chain = f[1]
	}
	for i := 2; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			target = f[i+1]
		}
	}
	return chain, target
}

// ownChains returns the chains of a table that kpng owns (by prefix).
func (t *table) ownChains() []string {
	if t == nil {
		return nil
	}
	var out []string
	for c := range t.chains {
		if strings.HasPrefix(c, chainPrefix) {
			out = append(out, c)
		}
	}
	return out
}

// builtinJumps returns the rules of builtin chains (not kpng's) that jump
// to a kpng chain.
func (t *table) builtinJumps() []string {
	if t == nil {
		return nil
	}
	var out []string
	for _, r := range t.rules {
		c, target := ruleChain(r)
		if !strings.HasPrefix(c, chainPrefix) && strings.HasPrefix(target, chainPrefix) {
			out = append(out, r)
		}
	}
	return out
}
