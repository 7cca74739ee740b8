package ebpf

import (
	"net/netip"
	"slices"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/proxyutil/host"
)

// NodePortAddrs decides which of the node's addresses accept NodePorts
// (--nodeport-addresses), for the socket and the tc programs alike: a
// frontend is keyed by its exact address, so each such address gets its
// own frontends. "primary" is the node's first address of the family in
// the view; CIDRs (or a family without any, which accepts on all) are
// matched against the host's interface addresses, read at a reset, a
// resync and a change of the node (Refresh). Loopback addresses never
// accept node ports, as in kube-proxy's nftables mode.
type NodePortAddrs struct {
	list []string
	// InterfaceAddrs lists the host's addresses (host.InterfaceAddrs).
	InterfaceAddrs func() ([]netip.Addr, error)
	local          []netip.Addr // as last read, sorted
}

// NewNodePortAddrs returns list's addresses (valid, see
// host.ValidateNodePortAddresses); nil or empty is "primary".
func NewNodePortAddrs(list []string) *NodePortAddrs {
	if len(list) == 0 {
		list = []string{"primary"}
	}
	return &NodePortAddrs{list: list, InterfaceAddrs: host.InterfaceAddrs}
}

// primaryOnly: the host's addresses do not matter.
func (n *NodePortAddrs) primaryOnly() bool {
	return len(n.list) == 1 && n.list[0] == "primary"
}

// Refresh reads the host's addresses again (unless only the primary
// address counts) and reports whether they changed.
func (n *NodePortAddrs) Refresh() (bool, error) {
	if n == nil || n.primaryOnly() {
		return false, nil
	}
	addrs, err := n.InterfaceAddrs()
	if err != nil {
		return false, err
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	changed := !slices.Equal(addrs, n.local)
	n.local = addrs
	return changed, nil
}

// Addrs returns the node's addresses of a family that accept NodePorts.
func (n *NodePortAddrs) Addrs(node *localv1.Node, fam localv1.IPFamily) []netip.Addr {
	if n == nil || n.primaryOnly() {
		return NodeAddrs(node, fam)
	}
	is6 := fam == localv1.IPFamily_IPV6
	var primary netip.Addr
	if p := NodeAddrs(node, fam); len(p) > 0 {
		primary = p[0]
	}
	np := host.NodePortsOf(n.list, is6)
	var out []netip.Addr
	if np.AllAddresses(primary) {
		for _, a := range n.local {
			if a.Is6() == is6 {
				out = append(out, a)
			}
		}
	} else {
		out = np.Addresses(is6, primary, n.local)
	}
	return slices.DeleteFunc(out, func(a netip.Addr) bool { return a.IsLoopback() || a.IsUnspecified() })
}
