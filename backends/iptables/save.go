package iptables

import (
	"bytes"
	"strings"
	"unicode"
)

// table is what iptables-save says about one table: its chains, and the
// rules ("-A CHAIN ..." lines) of the chains kpng does not own, where its
// jumps are. The rules of kpng's own chains are not kept: at 10,000
// services they are 330,000 lines that no caller reads.
type table struct {
	chains map[string]bool
	rules  []string
}

// parseSave reads iptables-save output into tables by name.
func parseSave(data []byte) map[string]*table {
	var p saveParser
	p.Write(data)
	return p.done()
}

// saveParser reads iptables-save output as it is written: at 10,000
// services it is 31 MB, nearly all of it the rules of kpng's own chains,
// which it skips without keeping them. It is lenient: lines it does not
// know are skipped, as iptables-save adds comments and warnings.
type saveParser struct {
	tables map[string]*table
	cur    *table
	// partial is a line not ended yet.
	partial []byte
}

// Write implements io.Writer.
func (p *saveParser) Write(b []byte) (int, error) {
	n := len(b)
	if len(p.partial) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.partial = append(p.partial, b...)
			return n, nil
		}
		p.partial = append(p.partial, b[:i]...)
		p.line(p.partial)
		p.partial = p.partial[:0]
		b = b[i+1:]
	}
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		p.line(b[:i])
		b = b[i+1:]
	}
	p.partial = append(p.partial, b...)
	return n, nil
}

// done reads the last line, if it has no newline, and returns the tables.
func (p *saveParser) done() map[string]*table {
	if len(p.partial) > 0 {
		p.line(p.partial)
		p.partial = nil
	}
	if p.tables == nil {
		p.tables = map[string]*table{}
	}
	return p.tables
}

func (p *saveParser) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte{'\r'})
	switch {
	case bytes.HasPrefix(l, []byte("*")):
		if p.tables == nil {
			p.tables = map[string]*table{}
		}
		p.cur = &table{chains: map[string]bool{}}
		p.tables[string(bytes.TrimSpace(l[1:]))] = p.cur
	case p.cur == nil:
	case bytes.HasPrefix(l, []byte(":")):
		f := bytes.TrimLeftFunc(l[1:], unicode.IsSpace)
		if i := bytes.IndexFunc(f, unicode.IsSpace); i >= 0 {
			f = f[:i]
		}
		if len(f) > 0 {
			p.cur.chains[string(f)] = true
		}
	case bytes.HasPrefix(l, []byte("-A ")):
		if !bytes.HasPrefix(l[len("-A "):], []byte(chainPrefix)) {
			p.cur.rules = append(p.cur.rules, string(l))
		}
	case string(l) == "COMMIT":
		p.cur = nil
	}
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
