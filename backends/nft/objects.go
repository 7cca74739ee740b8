package nft

import (
	"crypto/sha256"
	"encoding/base32"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

// The desired ruleset is made of parts: the fixed part (base chains, maps,
// sets) and one part per service. A part is built from scratch, purely from
// the state, and compared with what was written before; only differences
// reach the kernel.

// rule is one rule of a chain: its nft text, and for the rules of service
// and endpoint chains the typed value the text was rendered from, which
// the netlink path renders into expressions (see rulespec.go).
type rule struct {
	text    string
	comment string
	spec    ruleSpec
}

// hook makes a chain a base chain.
type hook struct {
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

// chain is a chain with all its rules.
type chain struct {
	name  string
	hook  *hook
	rules []rule
	// sig identifies the chain's content as the kernel can show it back: the
	// comments of its rules (the first carries a hash of everything) and its
	// hook. Two chains with the same sig are the same chain.
	sig string
}

// set is a set or a map (without its elements).
type set struct {
	name  string
	isMap bool
	typ   string // "ipv4_addr . inet_proto . inet_service : verdict", as listed
	// typeOf, when set, is how the set is declared ("typeof ..."), for key
	// types nft has no name for (the endpoint maps: see endpointMap).
	typeOf  string
	flags   []knftables.SetFlag
	timeout time.Duration
	comment string
	// dynamic: the packet path fills it (affinity); its elements are not ours.
	dynamic bool
}

// sig identifies the definition, in the terms the kernel lists it.
func (s *set) sig() string {
	return s.typ + "|" + strconv.FormatInt(int64(s.timeout/time.Second), 10)
}

// elemID names one element of one set or map.
type elemID struct {
	set string
	key string // key parts joined by " . "
}

// elem is one element and its value ("" in a set).
type elem struct {
	elemID
	isMap   bool
	value   string
	comment string
}

// part is what one owner (the fixed ruleset, or a service) wants.
type part struct {
	chains []*chain
	sets   []*set
	elems  []elem
}

// seal computes the chain's signature and stamps the first rule's comment
// with a hash of the whole chain, so that reading the kernel back (where
// rules come out in a different syntax) still tells whether the chain is
// exactly the one we wrote.
func (c *chain) seal() *chain {
	h := sha256.New()
	h.Write([]byte(c.name))
	if c.hook != nil {
		h.Write([]byte("\x00" + string(c.hook.typ) + "\x00" + string(c.hook.hook) + "\x00" + string(c.hook.priority)))
	}
	for _, r := range c.rules {
		h.Write([]byte("\x00" + r.text + "\x00" + r.comment))
	}
	if len(c.rules) > 0 {
		stamp := "#" + base32.StdEncoding.EncodeToString(h.Sum(nil))[:12]
		if c.rules[0].comment == "" {
			c.rules[0].comment = stamp
		} else {
			c.rules[0].comment += " " + stamp
		}
	}
	c.sig = chainSig(c.hook, ruleComments(c.rules))
	return c
}

func ruleComments(rules []rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.comment
	}
	return out
}

// chainSig is the signature of a chain with this hook and these rule
// comments (the form in which both our chains and the kernel's are known).
func chainSig(h *hook, comments []string) string {
	var b strings.Builder
	if h != nil {
		prio, err := knftables.ParsePriority(knftables.IPv4Family, string(h.priority))
		if err != nil {
			prio = -1 << 20
		}
		b.WriteString(hookSig(string(h.typ), string(h.hook), prio))
	}
	for _, c := range comments {
		b.WriteString("\x00")
		b.WriteString(c)
	}
	return b.String()
}

// itoa formats an integer.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// joinKey joins key or value parts as nft prints them.
func joinKey(parts ...string) string { return strings.Join(parts, " . ") }

// splitKey undoes joinKey.
func splitKey(s string) []string { return strings.Split(s, " . ") }
