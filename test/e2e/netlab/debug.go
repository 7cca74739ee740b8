package netlab

import (
	"fmt"
	"strings"
)

// debugCommands are what Dump shows of a node: the kernel state a proxy
// programs, and the plumbing it relies on.
var debugCommands = [][]string{
	{"nft", "list", "ruleset"},
	{"iptables-save"},
	{"ip6tables-save"},
	{"conntrack", "-L", "-f", "ipv4"},
	{"conntrack", "-L", "-f", "ipv6"},
	// Per-CPU conntrack statistics: a packet dropped at the table's
	// insertion (insert_failed, drop: a clash) or seen as invalid leaves no
	// entry to find above.
	{"conntrack", "-S"},
	{"ip", "-br", "addr"},
	{"ip", "route"},
	{"ip", "-6", "route"},
	// Neighbour entries and the stack's counters (absolute, without
	// touching nstat's history file): a path that fails in one family
	// only shows here (a FAILED neighbour, solicitations unanswered, IPv6
	// packets without a route).
	{"ip", "neigh", "show"},
	{"nstat", "-as"},
}

// Dump returns the node's nftables ruleset, iptables-save and ip6tables-save
// output, conntrack tables, addresses, routes, neighbours and network
// counters, for debugging. A command
// that fails shows its error in place of its output.
func (n *Node) Dump() string {
	var b strings.Builder
	for _, argv := range debugCommands {
		fmt.Fprintf(&b, "--- node %s: %s\n", n.Name, strings.Join(argv, " "))
		out, err := n.Run(argv...)
		if err != nil {
			fmt.Fprintf(&b, "(error: %v)\n", err)
			continue
		}
		b.WriteString(out)
	}
	if n.BPFFS != "" && kpngPath != "" {
		// What a dataplane pinned there, e.g. to-ebpf's maps.
		argv := []string{kpngPath, "ebpf-maps", "--ebpf-pin-path", n.PinPath()}
		fmt.Fprintf(&b, "--- node %s: %s\n", n.Name, strings.Join(argv, " "))
		out, err := n.Run(argv...)
		if err != nil {
			fmt.Fprintf(&b, "(error: %v)\n", err)
		}
		b.WriteString(out)
	}
	return b.String()
}

// Dump returns every node's Dump and the output of every process started in
// the lab. New logs it when a test fails, before teardown.
func (l *Lab) Dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "netlab: state of lab %s\n", l.ID)
	for _, n := range l.Nodes {
		if n.NS != nil {
			b.WriteString(n.Dump())
		}
	}
	l.mu.Lock()
	procs := l.procs
	l.mu.Unlock()
	for _, p := range procs {
		fmt.Fprintf(&b, "--- process in %s: %s\n%s", p.ns.Name, strings.Join(p.Argv, " "), p.Output())
	}
	return b.String()
}
