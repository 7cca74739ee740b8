package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// fakeTables is an in-memory iptables that understands the restore input
// this backend writes (--noflush): chain lines, -A, -I, -D, -F, -X. It is
// atomic like the nft variant (a failing line applies nothing) and checks
// what the kernel checks that matters here: a jump names an existing chain,
// a deleted chain exists and is not referenced. It lets unit tests prove
// that a run of partial syncs leaves exactly what one full sync writes.
type fakeTables struct {
	tables   map[string]map[string][]string // table -> chain -> rules
	restores []string                       // every input, in order
	failNext error
	failAll  error // every restore fails while set
	failSave error // every save fails while set
}

var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

func newFakeTables() *fakeTables {
	f := &fakeTables{tables: map[string]map[string][]string{}}
	for t, cs := range builtinChains {
		f.tables[t] = map[string][]string{}
		for _, c := range cs {
			f.tables[t][c] = nil
		}
	}
	return f
}

func isBuiltin(table, chain string) bool { return slices.Contains(builtinChains[table], chain) }

func (f *fakeTables) clone() map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for t, cs := range f.tables {
		out[t] = map[string][]string{}
		for c, rs := range cs {
			out[t][c] = slices.Clone(rs)
		}
	}
	return out
}

func (f *fakeTables) restore(_ context.Context, in input) error {
	var b bytes.Buffer
	if _, err := in.WriteTo(&b); err != nil {
		return err
	}
	data := b.Bytes()
	f.restores = append(f.restores, string(data))
	if f.failAll != nil {
		return f.failAll
	}
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	tables := f.clone()
	var cur map[string][]string
	var curName string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<20)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		fail := func(msg string) error { return fmt.Errorf("line %d failed: %s: %q", n, msg, l) }
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "*"):
			curName = l[1:]
			cur = tables[curName]
			if cur == nil {
				cur = map[string][]string{}
				tables[curName] = cur
			}
		case l == "COMMIT":
			if err := checkRefs(curName, cur); err != nil {
				return fmt.Errorf("line %d failed: %w", n, err)
			}
			cur = nil
		case cur == nil:
			return fail("outside a table")
		case strings.HasPrefix(l, ":"):
			c := strings.Fields(l[1:])[0]
			if isBuiltin(curName, c) {
				return fail("builtin chain line")
			}
			cur[c] = nil // create or flush
		default:
			f := strings.Fields(l)
			if len(f) < 2 {
				return fail("short line")
			}
			op, c := f[0], f[1]
			rs, ok := cur[c]
			if !ok {
				return fail("No chain/target/match by that name")
			}
			switch op {
			case "-A":
				cur[c] = append(rs, rest(l, 2))
			case "-I":
				if len(f) < 3 || f[2] != "1" {
					return fail("only -I CHAIN 1 is supported")
				}
				cur[c] = append([]string{rest(l, 3)}, rs...)
			case "-D":
				i := slices.Index(rs, rest(l, 2))
				if i < 0 {
					return fail("Bad rule (does a matching rule exist in that chain?)")
				}
				cur[c] = slices.Delete(rs, i, i+1)
			case "-F":
				cur[c] = nil
			case "-X":
				if len(rs) > 0 {
					return fail("Directory not empty")
				}
				delete(cur, c)
			default:
				return fail("unknown command")
			}
		}
	}
	if cur != nil {
		return fmt.Errorf("no COMMIT")
	}
	f.tables = tables
	return nil
}

// rest returns l without its first n fields.
func rest(l string, n int) string {
	for range n {
		l = strings.TrimLeft(l, " ")
		i := strings.IndexByte(l, ' ')
		if i < 0 {
			return ""
		}
		l = l[i:]
	}
	return strings.TrimLeft(l, " ")
}

// checkRefs fails if a rule jumps to a chain that does not exist.
func checkRefs(table string, t map[string][]string) error {
	for c, rs := range t {
		for _, r := range rs {
			_, target := ruleChain("-A " + c + " " + r)
			if strings.HasPrefix(target, chainPrefix) {
				if _, ok := t[target]; !ok {
					return fmt.Errorf("%s %s: jump to missing chain %s", table, c, target)
				}
			}
		}
	}
	return nil
}

func (f *fakeTables) save(_ context.Context, w io.Writer) error {
	if f.failSave != nil {
		return f.failSave
	}
	_, err := w.Write(f.saved())
	return err
}

// saved prints the tables as iptables-save does (chains sorted).
func (f *fakeTables) saved() []byte {
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(f.tables)) {
		b.WriteString("*" + t + "\n")
		cs := f.tables[t]
		names := slices.Sorted(maps.Keys(cs))
		for _, c := range names {
			policy := "-"
			if isBuiltin(t, c) {
				policy = "ACCEPT"
			}
			fmt.Fprintf(&b, ":%s %s [0:0]\n", c, policy)
		}
		for _, c := range names {
			for _, r := range cs[c] {
				fmt.Fprintf(&b, "-A %s %s\n", c, r)
			}
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}

// dump returns the saved tables as a string, for comparisons.
func (f *fakeTables) dump() string { return string(f.saved()) }

// chain returns a chain's rules, one per line.
func (f *fakeTables) chain(table, name string) string {
	var b strings.Builder
	for _, r := range f.tables[table][name] {
		b.WriteString(r + "\n")
	}
	return b.String()
}
