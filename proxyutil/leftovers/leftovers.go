// Package leftovers removes what upstream kube-proxy leaves in the kernel
// when it stops: the rules of its iptables and ipvs modes (its iptables
// chains, the jumps into them, ipvs's kube-ipvs0 interface and virtual
// servers) and of its nftables mode (the kube-proxy tables). kpng runs it
// once its own rules are in place, as kube-proxy itself does when its mode
// changes, so that a node switched from kube-proxy to kpng keeps no second
// set of rules, and no packet ever meets neither.
//
// It removes exactly what kube-proxy 1.36's own cleanup removes
// (pkg/proxy/{iptables,ipvs,nftables}/cleanup.go): never the kubelet's
// chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT,
// KUBE-MARK-DROP), nor anything else.
package leftovers

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
)

// kubeProxyChains are kube-proxy's chains by table: those of its iptables
// mode and of its ipvs mode.
var kubeProxyChains = map[string][]string{
	"nat": {
		"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-PROXY-CANARY",
		"KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", // ipvs
	},
	"filter": {
		"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL", "KUBE-PROXY-CANARY",
		"KUBE-NODE-PORT", "KUBE-SOURCE-RANGES-FIREWALL", "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER", // ipvs
	},
	"mangle": {"KUBE-PROXY-CANARY"},
}

// Tables are the iptables tables kube-proxy writes to.
var Tables = []string{"nat", "filter", "mangle"}

// servicePrefixes name kube-proxy's per-service and per-endpoint nat chains.
var servicePrefixes = []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-FW-", "KUBE-EXT-"}

// isKubeProxyChain reports whether chain of table is kube-proxy's.
func isKubeProxyChain(table, chain string) bool {
	if slices.Contains(kubeProxyChains[table], chain) {
		return true
	}
	return table == "nat" && slices.ContainsFunc(servicePrefixes, func(p string) bool { return strings.HasPrefix(chain, p) })
}

// IptablesRestore returns the iptables-restore input (for --noflush) that
// removes kube-proxy's chains from table, given `iptables-save -t table`,
// and the names of the chains it removes; nil when there is none. Every
// rule of another chain that jumps to one of them is deleted first (in the
// built-in chains, kube-proxy's own jumps; anywhere else, so that the
// chains can go), then the chains are flushed and deleted, in one
// transaction: it applies whole or not at all.
func IptablesRestore(table string, saved []byte) ([]byte, []string) {
	var chains, jumps []string
	inTable := false
	sc := bufio.NewScanner(bytes.NewReader(saved))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			inTable = line[1:] == table
		case !inTable:
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if isKubeProxyChain(table, name) {
				chains = append(chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			jumps = append(jumps, line)
		}
	}
	if len(chains) == 0 {
		return nil, nil
	}
	removed := map[string]bool{}
	for _, c := range chains {
		removed[c] = true
	}
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	for _, c := range chains {
		b.WriteString(":" + c + " - [0:0]\n") // flushes it
	}
	for _, rule := range jumps {
		f := strings.Fields(rule)
		from, target := f[1], ruleTarget(f)
		if !removed[from] && removed[target] {
			b.WriteString("-D" + rule[2:] + "\n")
		}
	}
	for _, c := range chains {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String()), chains
}

// ruleTarget returns the chain a rule (iptables-save's -A line, split in
// fields) jumps or goes to.
func ruleTarget(f []string) string {
	for i := 2; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			return f[i+1]
		}
	}
	return ""
}
