package ipvs

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/kpng/kpng/proxyutil/host"
)

// The backend's iptables chains: those of kube-proxy's ipvs mode, named
// KPNG-IPVS-*.
const (
	chainServices     = "KPNG-IPVS-SERVICES"      // nat: masquerade marks, accept service traffic
	chainPostrouting  = "KPNG-IPVS-POSTROUTING"   // nat: masquerade what was marked, and hairpin traffic
	chainMarkMasq     = "KPNG-IPVS-MARK-MASQ"     // nat
	chainNodePort     = "KPNG-IPVS-NODE-PORT"     // nat: node-port traffic, marked unless Local
	chainLoadBalancer = "KPNG-IPVS-LOAD-BALANCER" // nat: load-balancer traffic, marked unless Local
	chainForward      = "KPNG-IPVS-FORWARD"       // filter: accept forwarded service traffic
	chainFirewall     = "KPNG-IPVS-FIREWALL"      // filter: loadBalancerSourceRanges
	chainSourceRanges = "KPNG-IPVS-SOURCE-RANGES" // filter
	chainHealthCheck  = "KPNG-IPVS-NODE-PORT"     // filter: health-check node ports
	chainFilter       = "KPNG-IPVS-FILTER"        // filter: refuse what is not a service on kube-ipvs0's addresses
	chainOutput       = "KPNG-IPVS-OUTPUT"        // mangle: the node's own new connections, before IPVS takes them
)

// chains are the backend's chains, by table, in the order
// iptables-restore writes the tables.
var chains = []struct {
	table  string
	chains []string
}{
	{"nat", []string{chainServices, chainPostrouting, chainMarkMasq, chainNodePort, chainLoadBalancer}},
	{"filter", []string{chainForward, chainFirewall, chainSourceRanges, chainHealthCheck, chainFilter}},
	{"mangle", []string{chainOutput}},
}

// jump is a rule of a built-in chain that enters one of the backend's.
type jump struct {
	table, chain string
	args         []string
}

// jumps are the backend's entries from the built-in chains, as kube-proxy's
// ipvs mode has them.
var jumps = []jump{
	{"nat", "PREROUTING", []string{"-j", chainServices}},
	{"nat", "OUTPUT", []string{"-j", chainServices}},
	{"nat", "POSTROUTING", []string{"-j", chainPostrouting}},
	{"filter", "INPUT", []string{"-m", "conntrack", "--ctstate", "NEW", "-j", chainFirewall}},
	{"filter", "OUTPUT", []string{"-m", "conntrack", "--ctstate", "NEW", "-j", chainFirewall}},
	{"filter", "INPUT", []string{"-j", chainHealthCheck}},
	{"filter", "INPUT", []string{"-j", chainFilter}},
	{"filter", "FORWARD", []string{"-j", chainForward}},
	// IPVS takes the node's own packets to a virtual server in LOCAL_OUT
	// right after the nat table, before filter OUTPUT: a virtual server
	// without real servers has refused them by then. What must drop them
	// runs in mangle OUTPUT, before IPVS.
	{"mangle", "OUTPUT", []string{"-m", "conntrack", "--ctstate", "NEW", "-j", chainOutput}},
}

// ruleConfig is what the rules depend on.
type ruleConfig struct {
	ipv6          bool
	masqueradeAll bool
	mark          uint32
	local         host.LocalTraffic
	dropInvalid   bool
}

// localMatch is the iptables match of traffic not from this node's pods.
func (c ruleConfig) notLocal() []string {
	l := c.local
	switch {
	case l.CIDR.IsValid():
		return []string{"!", "-s", l.CIDR.String()}
	case l.Interface != "":
		return []string{"!", "-i", l.Interface}
	case l.InterfacePrefix != "":
		return []string{"!", "-i", strings.TrimSuffix(l.InterfacePrefix, "+") + "+"}
	}
	return nil
}

// rulesScript is the iptables-restore --noflush input of the backend's
// chains: each is declared (so emptied) and filled. The rules do not
// depend on the services (the ipsets do), so a change of services never
// rewrites them.
func rulesScript(c ruleConfig) []byte {
	var b bytes.Buffer
	set := func(base string) string { return setName(base, c.ipv6) }
	rule := func(chain string, args ...string) {
		fmt.Fprintf(&b, "-A %s %s\n", chain, strings.Join(args, " "))
	}
	mark := fmt.Sprintf("%#x", c.mark)
	markMask := fmt.Sprintf("%#x/%#x", c.mark, c.mark)

	// declare starts table's section, declaring (so emptying) its chains.
	declare := func(table string) {
		fmt.Fprintf(&b, "*%s\n", table)
		for _, t := range chains {
			if t.table == table {
				for _, ch := range t.chains {
					fmt.Fprintf(&b, ":%s - [0:0]\n", ch)
				}
			}
		}
	}
	declare("nat")
	rule(chainMarkMasq, "-j", "MARK", "--or-mark", mark)
	rule(chainPostrouting, "-m", "set", "--match-set", set(setLoopBack), "dst,dst,src", "-j", "MASQUERADE")
	rule(chainPostrouting, "-m", "mark", "!", "--mark", markMask, "-j", "RETURN")
	rule(chainPostrouting, "-j", "MARK", "--xor-mark", mark)
	rule(chainPostrouting, "-j", "MASQUERADE", "--random-fully")
	// Cluster IPs: traffic from outside the pods (or all with
	// --masquerade-all) is masqueraded, so that answers come back here.
	clusterIP := []string{"-m", "set", "--match-set", set(setClusterIP), "dst,dst"}
	if c.masqueradeAll {
		rule(chainServices, append(clusterIP, "-j", chainMarkMasq)...)
	} else if nl := c.notLocal(); nl != nil {
		rule(chainServices, append(append(nl[:len(nl):len(nl)], clusterIP...), "-j", chainMarkMasq)...)
	} else {
		// Without local-traffic detection, as kube-proxy's ipvs mode:
		// the node's own connection to a cluster IP leaves from that
		// cluster IP (kube-ipvs0 holds it, so the kernel picks it as the
		// source), which an endpoint elsewhere could not answer (its
		// node holds the address too): masquerade what comes from a
		// cluster IP to a service port.
		rule(chainServices, "-m", "set", "--match-set", set(setClusterIP), "src,dst", "-j", chainMarkMasq)
	}
	// External IPs: masqueraded unless Local; accepted from off-node, or
	// when the address is the node's own.
	ext := []string{"-m", "set", "--match-set", set(setExternalIP), "dst,dst"}
	rule(chainServices, append(ext, "-j", chainMarkMasq)...)
	for _, s := range []string{setExternalIP, setExternalIPLocal} {
		m := []string{"-m", "set", "--match-set", set(s), "dst,dst"}
		rule(chainServices, append(m, "-m", "addrtype", "!", "--src-type", "LOCAL", "-j", "ACCEPT")...)
		rule(chainServices, append(m, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT")...)
	}
	rule(chainServices, "-m", "set", "--match-set", set(setLoadBalancer), "dst,dst", "-j", chainLoadBalancer)
	rule(chainLoadBalancer, "-m", "set", "--match-set", set(setLoadBalancerLocal), "dst,dst", "-j", "RETURN")
	rule(chainLoadBalancer, "-j", chainMarkMasq)
	for _, p := range protocols {
		rule(chainNodePort, "-p", p, "-m", "set", "--match-set", set(nodePortSet(p, true)), "dst", "-j", "RETURN")
		rule(chainNodePort, "-p", p, "-m", "set", "--match-set", set(nodePortSet(p, false)), "dst", "-j", chainMarkMasq)
	}
	rule(chainServices, "-m", "set", "--match-set", set(setClusterIP), "dst,dst", "-j", "ACCEPT")
	rule(chainServices, "-m", "set", "--match-set", set(setLoadBalancer), "dst,dst", "-j", "ACCEPT")
	rule(chainServices, "-m", "addrtype", "--dst-type", "LOCAL", "-j", chainNodePort)
	b.WriteString("COMMIT\n")

	declare("filter")
	if c.dropInvalid {
		rule(chainForward, "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP")
	}
	rule(chainForward, "-m", "mark", "--mark", markMask, "-j", "ACCEPT")
	rule(chainForward, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
	// loadBalancerSourceRanges: a load-balancer address:port with ranges
	// accepts only sources within them.
	rule(chainFirewall, "-m", "set", "--match-set", set(setLoadBalancerFW), "dst,dst", "-j", chainSourceRanges)
	// A Local policy without local endpoints drops, as the view says
	// (kube-proxy's nftables and iptables modes do; IPVS alone refuses):
	// here what comes from outside the node (INPUT runs filter before
	// IPVS), in mangle OUTPUT what the node itself sends.
	rule(chainFirewall, "-m", "set", "--match-set", set(setDrop), "dst,dst", "-j", "DROP")
	rule(chainSourceRanges, "-m", "set", "--match-set", set(setLoadBalancerSourceCIDR), "dst,dst,src", "-j", "RETURN")
	rule(chainSourceRanges, "-j", "DROP")
	rule(chainHealthCheck, "-m", "set", "--match-set", set(setHealthCheckNodePort), "dst", "-j", "ACCEPT")
	// kube-ipvs0's addresses answer only on their services' ports.
	for _, s := range []string{setLoadBalancer, setClusterIP, setExternalIP, setExternalIPLocal} {
		rule(chainFilter, "-m", "set", "--match-set", set(s), "dst,dst", "-j", "RETURN")
	}
	rule(chainFilter, "-m", "set", "--match-set", set(setHealthCheckNodePort), "dst", "-j", "RETURN")
	rule(chainFilter, "-m", "conntrack", "--ctstate", "NEW", "-m", "set", "--match-set", set(setIPVSIPs), "dst", "-j", "REJECT")
	b.WriteString("COMMIT\n")

	declare("mangle")
	rule(chainOutput, "-m", "set", "--match-set", set(setDrop), "dst,dst", "-j", "DROP")
	b.WriteString("COMMIT\n")
	return b.Bytes()
}
