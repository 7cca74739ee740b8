package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Chain names. Every chain kpng owns starts with chainPrefix, so kpng can run
// beside kube-proxy (whose chains start with KUBE-) and --cleanup can find
// everything it ever created by name alone.
const (
	chainPrefix = "KPNG-"

	// nat and filter: the service dispatch (nat) and the rejects and drops
	// of services without (usable) endpoints (filter).
	chainServices = "KPNG-SERVICES"
	// nat: node ports, reached from the tail of nat KPNG-SERVICES; filter:
	// health-check node ports accepted on INPUT.
	chainNodePorts = "KPNG-NODEPORTS"
	// nat: SNAT of marked traffic, from POSTROUTING.
	chainPostrouting = "KPNG-POSTROUTING"
	// nat: marks a packet for SNAT.
	chainMarkMasq = "KPNG-MARK-MASQ"
	// filter: rejects and drops for external destinations (external IPs,
	// load-balancer IPs, node ports) without usable endpoints.
	chainExternalServices = "KPNG-EXTERNAL-SERVICES"
	// filter: accepts forwarded service traffic even with a DROP policy.
	chainForward = "KPNG-FORWARD"
	// filter: drops load-balancer traffic not allowed by its source ranges.
	chainProxyFirewall = "KPNG-PROXY-FIREWALL"
	// filter: the CVE-2020-8558 protection of localhost node ports.
	chainFirewall = "KPNG-FIREWALL"
	// nat and filter: an empty chain whose disappearance says the table was
	// flushed behind kpng's back. Partial syncs flush it ("-F"), which fails
	// when it is gone, so the check costs no extra process.
	chainCanary = "KPNG-PROXY-CANARY"

	// Per service port and endpoint chains (nat), named by stable hashes.
	prefixSVC = "KPNG-SVC-" // endpoints for the Cluster policy
	prefixSVL = "KPNG-SVL-" // endpoints for the Local policy
	prefixEXT = "KPNG-EXT-" // external destinations
	prefixFW  = "KPNG-FW-"  // loadBalancerSourceRanges
	prefixSEP = "KPNG-SEP-" // one endpoint
)

// hashName is the 16-character hash that names a service port's or an
// endpoint's chains: stable across restarts and kpng versions, so a restart
// rewrites chains in place rather than renaming them, and short enough for
// iptables' 28-character chain names.
func hashName(parts ...string) string { return string(appendHash(nil, parts...)) }

// chainName is prefix followed by hashName(parts...), made in one
// allocation (render names a chain per endpoint).
func chainName(prefix string, parts ...string) string {
	var buf [32]byte
	return string(appendHash(append(buf[:0], prefix...), parts...))
}

// appendHash appends hashName(parts...) to dst.
func appendHash(dst []byte, parts ...string) []byte {
	var buf [256]byte
	in := buf[:0]
	for i, p := range parts {
		if i > 0 {
			in = append(in, 0)
		}
		in = append(in, p...)
	}
	h := sha256.Sum256(in)
	// Base32 turns each 5 bytes into 8 characters: the first 10 bytes are
	// the first 16 characters of the whole hash's encoding.
	var enc [16]byte
	base32.StdEncoding.Encode(enc[:], h[:10])
	return append(dst, enc[:]...)
}

// builtinJump is a rule kpng adds to a builtin chain to reach one of its own.
type builtinJump struct {
	table   string
	from    string // builtin chain
	to      string // kpng chain
	comment string
	match   []string // before the comment
}

// jumps are inserted at the top of the builtin chains, in this order, on
// every full sync where they are missing, and removed by --cleanup.
var jumps = []builtinJump{
	{"filter", "INPUT", chainExternalServices, "kpng externally-visible service portals", ctNew},
	{"filter", "FORWARD", chainExternalServices, "kpng externally-visible service portals", ctNew},
	{"filter", "INPUT", chainNodePorts, "kpng health check service ports", nil},
	{"filter", "FORWARD", chainServices, "kpng service portals", ctNew},
	{"filter", "OUTPUT", chainServices, "kpng service portals", ctNew},
	{"filter", "FORWARD", chainForward, "kpng forwarding rules", nil},
	{"filter", "INPUT", chainProxyFirewall, "kpng load balancer firewall", ctNew},
	{"filter", "OUTPUT", chainProxyFirewall, "kpng load balancer firewall", ctNew},
	{"filter", "FORWARD", chainProxyFirewall, "kpng load balancer firewall", ctNew},
	{"nat", "OUTPUT", chainServices, "kpng service portals", nil},
	{"nat", "PREROUTING", chainServices, "kpng service portals", nil},
	{"nat", "POSTROUTING", chainPostrouting, "kpng postrouting rules", nil},
}

// firewallJumps reach KPNG-FIREWALL; only IPv4 with localhost node ports
// has that chain.
var firewallJumps = []builtinJump{
	{"filter", "INPUT", chainFirewall, "kpng localhost node port protection", nil},
	{"filter", "OUTPUT", chainFirewall, "kpng localhost node port protection", nil},
}

var ctNew = []string{"-m", "conntrack", "--ctstate", "NEW"}

// args is the rule's specification after "-I <from> 1".
func (j builtinJump) args() string {
	var b strings.Builder
	for _, m := range j.match {
		b.WriteString(m)
		b.WriteByte(' ')
	}
	b.WriteString(`-m comment --comment "` + j.comment + `" -j ` + j.to)
	return b.String()
}
