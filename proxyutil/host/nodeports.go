package host

import (
	"fmt"
	"net"
	"net/netip"
)

// ValidateNodePortAddresses checks --nodeport-addresses: CIDRs, or
// "primary" alone.
func ValidateNodePortAddresses(list []string) error {
	if len(list) == 1 && list[0] == "primary" {
		return nil
	}
	for _, s := range list {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("--nodeport-addresses: %q is neither a CIDR nor \"primary\" alone", s)
		}
	}
	return nil
}

// NodePorts is --nodeport-addresses for one family, as kube-proxy's
// NodePortAddresses reads it: CIDRs of the other family are ignored, and a
// family left without any (or with a /0) accepts node ports on every local
// address.
type NodePorts struct {
	// Primary: the node's primary IP of the family accepts them.
	Primary bool
	// All: every local address of the family accepts them.
	All bool
	// CIDRs: the local addresses within them accept them (neither Primary
	// nor All).
	CIDRs []netip.Prefix
	// ContainsLoopback: an IPv4 loopback address is among those that
	// accept them (which only a backend that can serve localhost node
	// ports, as kube-proxy's iptables mode, acts on).
	ContainsLoopback bool
}

// NodePortsOf reads list (valid, see ValidateNodePortAddresses) for a
// family.
func NodePortsOf(list []string, ipv6 bool) NodePorts {
	if len(list) == 1 && list[0] == "primary" {
		return NodePorts{Primary: true}
	}
	var n NodePorts
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is6() != ipv6 {
			continue
		}
		p = p.Masked()
		if p.Bits() == 0 {
			return NodePorts{All: true, ContainsLoopback: !ipv6}
		}
		if !ipv6 && (p.Addr().IsLoopback() || p.Contains(netip.AddrFrom4([4]byte{127, 0, 0, 1}))) {
			n.ContainsLoopback = true
		}
		n.CIDRs = append(n.CIDRs, p)
	}
	if len(n.CIDRs) == 0 {
		return NodePorts{All: true, ContainsLoopback: !ipv6}
	}
	return n
}

// AllAddresses reports whether every local address accepts node ports,
// given the node's primary IP of the family: "primary" without a usable
// primary IP (none, or loopback) has no CIDR, so it matches all, as
// kube-proxy's does.
func (n NodePorts) AllAddresses(primary netip.Addr) bool {
	return n.All || n.Primary && (!primary.IsValid() || primary.IsLoopback())
}

// Addresses returns the addresses that accept node ports when not all do:
// the primary IP, or the local addresses (of the family, in the order
// given, each once) within the CIDRs.
func (n NodePorts) Addresses(ipv6 bool, primary netip.Addr, local []netip.Addr) []netip.Addr {
	if n.Primary {
		if primary.IsValid() {
			return []netip.Addr{primary}
		}
		return nil
	}
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, ip := range local {
		if ip.Is6() != ipv6 || seen[ip] {
			continue
		}
		for _, p := range n.CIDRs {
			if p.Contains(ip) {
				seen[ip] = true
				out = append(out, ip)
				break
			}
		}
	}
	return out
}

// InterfaceAddrs lists the addresses of the network namespace's
// interfaces (it reads the host), IPv4-mapped ones unmapped.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
