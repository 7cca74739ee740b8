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

// setTmp is the base name of the set each set is refilled in, aside, at a
// full sync, before it is swapped in.
const setTmp = "TMP"

// createSet is the ipset restore line that creates base (when missing).
func createSet(base string, ipv6 bool) string {
	return createSetAs(setName(base, ipv6), base, ipv6)
}

// createSetAs is the ipset restore line that creates a set called name of
// base's type (when missing).
func createSetAs(name, base string, ipv6 bool) string {
	typ := setTypes[base]
	if strings.HasPrefix(typ, "bitmap:") {
		return fmt.Sprintf("create %s %s range 0-65535 -exist", name, typ)
	}
	fam := "inet"
	if ipv6 {
		fam = "inet6"
	}
	return fmt.Sprintf("create %s %s family %s hashsize 1024 maxelem 1048576 -exist", name, typ, fam)
}

// fullSetScript writes the ipset restore input that makes every set of the
// family hold exactly entries. Each set is filled aside (setTmp) and
// swapped in, which the kernel does at once: a set flushed and refilled in
// place is empty meanwhile, and a packet then misses its service (a new
// connection to a cluster IP, say, is refused as a port kube-ipvs0's
// address does not serve; kpng's restart refused such a datagram in the
// shared suite). existing are the sets in the kernel: a setTmp left by a
// restore that failed half-way is destroyed first.
func fullSetScript(ipv6 bool, entries map[setEntry]int, existing map[string]bool) []byte {
	return setsScript(ipv6, entries, existing, sortedKeys(setTypes))
}

// setsScript is fullSetScript for the sets of bases only (base names):
// each created when missing, filled aside and swapped in.
func setsScript(ipv6 bool, entries map[setEntry]int, existing map[string]bool, bases []string) []byte {
	var b bytes.Buffer
	tmp := setName(setTmp, ipv6)
	if existing[tmp] {
		fmt.Fprintf(&b, "destroy %s\n", tmp)
	}
	bySet := map[string][]string{}
	for _, e := range sortedEntries(entries) {
		bySet[e.Set] = append(bySet[e.Set], e.Entry)
	}
	for _, base := range bases {
		fmt.Fprintln(&b, createSet(base, ipv6))
		fmt.Fprintln(&b, createSetAs(tmp, base, ipv6))
		for _, e := range bySet[base] {
			fmt.Fprintf(&b, "add %s %s -exist\n", tmp, e)
		}
		fmt.Fprintf(&b, "swap %s %s\n", tmp, setName(base, ipv6))
		fmt.Fprintf(&b, "destroy %s\n", tmp)
	}
	return b.Bytes()
}

// setScript writes the ipset restore input that adds and deletes the given
// entries.
func setScript(ipv6 bool, add, del []setEntry) []byte {
	var b bytes.Buffer
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
	for _, base := range append(sortedKeys(setTypes), setTmp) {
		if existing[setName(base, ipv6)] {
			fmt.Fprintf(&b, "destroy %s\n", setName(base, ipv6))
		}
	}
	return b.Bytes()
}
