package ipvs

import (
	"bytes"
	"fmt"
	"strings"
)

// The backend's ipsets (base names; IPv6 sets are prefixed KPNG-6-, IPv4
// ones KPNG-), those of kube-proxy's ipvs mode under names of kpng's own,
// so that kube-proxy's cleanup and kpng's never take each other's.
const (
	setClusterIP              = "CLUSTER-IP"             // hash:ip,port: cluster IP, protocol, port
	setLoopBack               = "LOOP-BACK"              // hash:ip,port,ip: a local endpoint reaching itself (hairpin)
	setExternalIP             = "EXTERNAL-IP"            // hash:ip,port
	setExternalIPLocal        = "EXTERNAL-IP-LOCAL"      // hash:ip,port: externalTrafficPolicy Local
	setLoadBalancer           = "LOAD-BALANCER"          // hash:ip,port
	setLoadBalancerLocal      = "LOAD-BALANCER-LOCAL"    // hash:ip,port: externalTrafficPolicy Local
	setLoadBalancerFW         = "LOAD-BALANCER-FW"       // hash:ip,port: with loadBalancerSourceRanges
	setLoadBalancerSourceCIDR = "LB-SOURCE-CIDR"         // hash:ip,port,net: the ranges allowed
	setHealthCheckNodePort    = "HEALTH-CHECK-NODE-PORT" // bitmap:port
	setIPVSIPs                = "IPVS-IPS"               // hash:ip: every address on kube-ipvs0
	setDrop                   = "DROP"                   // hash:ip,port: endpoints exist, none for this address (Local policy)
)

// nodePortSet names the bitmap of a protocol's node ports (Local: those of
// externalTrafficPolicy Local).
func nodePortSet(proto string, local bool) string {
	if local {
		return "NODE-PORT-LOCAL-" + strings.ToUpper(proto)
	}
	return "NODE-PORT-" + strings.ToUpper(proto)
}

var protocols = []string{"tcp", "udp", "sctp"}

// setTypes are the sets and their ipset types.
var setTypes = func() map[string]string {
	m := map[string]string{
		setClusterIP:              "hash:ip,port",
		setLoopBack:               "hash:ip,port,ip",
		setExternalIP:             "hash:ip,port",
		setExternalIPLocal:        "hash:ip,port",
		setLoadBalancer:           "hash:ip,port",
		setLoadBalancerLocal:      "hash:ip,port",
		setLoadBalancerFW:         "hash:ip,port",
		setLoadBalancerSourceCIDR: "hash:ip,port,net",
		setHealthCheckNodePort:    "bitmap:port",
		setIPVSIPs:                "hash:ip",
		setDrop:                   "hash:ip,port",
	}
	for _, p := range protocols {
		m[nodePortSet(p, false)] = "bitmap:port"
		m[nodePortSet(p, true)] = "bitmap:port"
	}
	return m
}()

// setName is the kernel name of base in a family.
func setName(base string, ipv6 bool) string {
	if ipv6 {
		return "KPNG-6-" + base
	}
	return "KPNG-" + base
}

// createSet is the ipset restore line that creates base (when missing).
func createSet(base string, ipv6 bool) string {
	typ := setTypes[base]
	if strings.HasPrefix(typ, "bitmap:") {
		return fmt.Sprintf("create %s %s range 0-65535 -exist", setName(base, ipv6), typ)
	}
	fam := "inet"
	if ipv6 {
		fam = "inet6"
	}
	return fmt.Sprintf("create %s %s family %s hashsize 1024 maxelem 1048576 -exist", setName(base, ipv6), typ, fam)
}

// setScript writes ipset restore input: with full, every set is created
// (when missing), flushed and filled with entries; otherwise add and del
// only the given entries.
func setScript(ipv6, full bool, entries map[setEntry]int, add, del []setEntry) []byte {
	var b bytes.Buffer
	if full {
		for _, base := range sortedKeys(setTypes) {
			fmt.Fprintln(&b, createSet(base, ipv6))
			fmt.Fprintf(&b, "flush %s\n", setName(base, ipv6))
		}
		for _, e := range sortedEntries(entries) {
			fmt.Fprintf(&b, "add %s %s -exist\n", setName(e.Set, ipv6), e.Entry)
		}
		return b.Bytes()
	}
	for _, e := range del {
		fmt.Fprintf(&b, "del %s %s -exist\n", setName(e.Set, ipv6), e.Entry)
	}
	for _, e := range add {
		fmt.Fprintf(&b, "add %s %s -exist\n", setName(e.Set, ipv6), e.Entry)
	}
	return b.Bytes()
}

// destroyScript is the ipset restore input that destroys the family's sets.
func destroyScript(ipv6 bool, existing map[string]bool) []byte {
	var b bytes.Buffer
	for _, base := range sortedKeys(setTypes) {
		if existing[setName(base, ipv6)] {
			fmt.Fprintf(&b, "destroy %s\n", setName(base, ipv6))
		}
	}
	return b.Bytes()
}
