package ipvs

import (
	"cmp"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
)

func netlinkPrefix(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func sortedEntries(m map[setEntry]int) []setEntry {
	return slices.SortedFunc(maps.Keys(m), func(a, b setEntry) int {
		return cmp.Or(strings.Compare(a.Set, b.Set), strings.Compare(a.Entry, b.Entry))
	})
}
