package kubeproxy

import (
	"context"
	"net/netip"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// nodeIPFeed is a feed whose node has the configuration's nodeIPOverride
// (kube-proxy's bindAddress) as its primary IP in each family, as
// kube-proxy's detectNodeIPs makes it: backends read a family's primary IP
// as the first address of that family (nodePortAddresses: [primary], the
// node's own traffic). The node's other addresses follow. While the Node
// is unknown (nil) it stays so: backends wait for it.
type nodeIPFeed struct {
	backend.Feed
	override []netip.Addr
}

// withNodeIPOverride wraps feed when ips (validated IPs, at most one per
// family) is not empty.
func withNodeIPOverride(feed backend.Feed, ips []string) backend.Feed {
	var override []netip.Addr
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && !ip.IsUnspecified() {
			override = append(override, ip.Unmap())
		}
	}
	if len(override) == 0 {
		return feed
	}
	return &nodeIPFeed{Feed: feed, override: override}
}

// Next returns the feed's state with a copy of its Node whose addresses
// start with the override; the feed's own state is not changed.
func (f *nodeIPFeed) Next(ctx context.Context) (*backend.State, backend.Changes, error) {
	state, changes, err := f.Feed.Next(ctx)
	if err != nil || state == nil || state.Node == nil {
		return state, changes, err
	}
	out := *state
	node := proto.Clone(state.Node).(*localv1.Node)
	node.Addresses = overrideAddresses(node.Addresses, f.override)
	out.Node = node
	return &out, changes, nil
}

// overrideAddresses puts override first and drops its duplicates from addrs.
func overrideAddresses(addrs []string, override []netip.Addr) []string {
	out := make([]string, 0, len(addrs)+len(override))
	for _, ip := range override {
		out = append(out, ip.String())
	}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && slices.Contains(override, ip.Unmap()) {
			continue
		}
		out = append(out, a)
	}
	return out
}
