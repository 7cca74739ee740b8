package nft

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"

	"sigs.k8s.io/knftables"
)

// Names of the fixed objects of a table. They are upstream kube-proxy's
// nftables names, so that anyone who reads one ruleset can read the other.
const (
	// Base chains: "<type>-<hook>".
	filterPreroutingPreDNATChain = "filter-prerouting-pre-dnat"
	filterOutputPreDNATChain     = "filter-output-pre-dnat"
	filterInputChain             = "filter-input"
	filterForwardChain           = "filter-forward"
	filterOutputChain            = "filter-output"
	natPreroutingChain           = "nat-prerouting"
	natOutputChain               = "nat-output"
	natPostroutingChain          = "nat-postrouting"

	// Service dispatch.
	servicesChain       = "services"
	serviceIPsMap       = "service-ips"
	serviceNodePortsMap = "service-nodeports"
	nodePortIPsSet      = "nodeport-ips"
	clusterIPsSet       = "cluster-ips"

	// Services without (usable) endpoints.
	serviceEndpointsCheckChain  = "service-endpoints-check"
	nodePortEndpointsCheckChain = "nodeport-endpoints-check"
	noEndpointServicesMap       = "no-endpoint-services"
	noEndpointNodePortsMap      = "no-endpoint-nodeports"
	rejectChain                 = "reject-chain"

	// Unallocated cluster IPs and undefined ports of cluster IPs.
	clusterIPsCheckChain = "cluster-ips-check"

	// loadBalancerSourceRanges.
	firewallIPsMap     = "firewall-ips"
	firewallCheckChain = "firewall-check"

	// Masquerading.
	masqueradingChain     = "masquerading"
	hairpinConnectionsSet = "hairpin-connections"
)

// Prefixes of the per-service objects. Every per-service chain name contains
// a "/", which no fixed name does.
const (
	clusterChainPrefix  = "service-"
	localChainPrefix    = "local-"
	externalChainPrefix = "external-"
	firewallChainPrefix = "firewall-"
	endpointChainPrefix = "endpoint-"
	affinitySetPrefix   = "affinity-"

	// prefixMax is the longest prefix, with its hyphen, that a base name
	// may be given; base names are cut to fit nftables' name limit.
	prefixMax   = 16
	baseNameMax = knftables.NameLengthMax - prefixMax
)

// hashedName prefixes name with 8 characters of its own hash, then cuts it
// to baseNameMax. The hash keeps a cut name unique and makes names that
// differ by one digit (two endpoints of a service) easy to tell apart.
func hashedName(name string) string {
	sum := sha256.Sum256([]byte(name))
	name = base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
	if len(name) > baseNameMax {
		name = name[:baseNameMax-3] + "..."
	}
	return name
}

// portBaseName names a service port's chains: HASH-namespace/name/proto/port.
// Namespaces, names and port names are [a-z0-9-], all legal in a chain name;
// "/" separates them because none of them can contain it.
func portBaseName(namespace, name, proto, portName string) string {
	return hashedName(namespace + "/" + name + "/" + proto + "/" + portName)
}

// endpointBaseName names an endpoint's chain and affinity set:
// HASH-namespace/name/proto/port__ip/port, with an IPv6 address's colons
// (illegal in names) turned into dots.
func endpointBaseName(namespace, name, proto, portName string, ip netip.Addr, port int32) string {
	addr := strings.ReplaceAll(ip.String(), ":", ".")
	return hashedName(namespace + "/" + name + "/" + proto + "/" + portName + "__" + addr + "/" + itoa(int64(port)))
}

// endpointMapName names the endpoint map of a service or local chain:
// "ep-" and 16 characters of the chain name's hash (80 bits: no two of a
// table's maps share one). It is short on purpose: the kernel finds a set
// by comparing the name with each set's of the table in turn, taking each
// name's length first, at every element command and every rule that names
// one. At 10,000 services, a cold sync took 19 s with maps named as their
// chains and 14 s with these (nft -f in a namespace).
func endpointMapName(chain string) string {
	sum := sha256.Sum256([]byte(chain))
	return "ep-" + base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// isServiceChain reports whether a chain is a per-service one.
func isServiceChain(name string) bool { return strings.Contains(name, "/") }
