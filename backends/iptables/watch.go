package iptables

import (
	"context"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/proxyutil/nfmonitor"
)

// jumpSourceChains are the chains kpng jumps from.
var jumpSourceChains = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

// foreignChange reports whether a change someone else made in the kernel
// can have touched kpng's rules: anything in a KPNG- chain, a deleted
// rule of a built-in chain (maybe a jump of kpng's), a deleted table.
func foreignChange(e nfmonitor.Event) bool {
	if e.Table != "nat" && e.Table != "filter" && e.Table != "mangle" {
		return false
	}
	switch {
	case strings.HasPrefix(e.Chain, chainPrefix):
		return true
	case e.Kind == "table" && e.Op == "del":
		return true
	case e.Kind == "rule" && e.Op == "del" && jumpSourceChains[e.Chain]:
		return true
	}
	return false
}

// watchKernel hears at once of changes made behind kpng's back to the
// tables of the nft variant of iptables (which writes through nf_tables),
// and has the next Resync, requested at once, rewrite the family's tables:
// a flushed nat table keeps kpng's canary chain, so the periodic check
// alone would never see it. The legacy variant has no notifications; its
// repairs wait for the periodic sync.
func (b *Backend) watchKernel(ctx context.Context) error {
	byFamily := map[uint8]*proxier{}
	for _, p := range b.proxiers {
		if p.ipv6 {
			byFamily[unix.NFPROTO_IPV6] = p
		} else {
			byFamily[unix.NFPROTO_IPV4] = p
		}
	}
	match := func(e nfmonitor.Event) bool { return byFamily[e.Family] != nil && foreignChange(e) }
	return nfmonitor.WatchForRepairs(ctx, klog.FromContext(ctx), "the iptables rules", match, func(evs []nfmonitor.Event) {
		if len(evs) == 0 { // notifications lost: any family
			for _, p := range byFamily {
				p.repair.Store(true)
			}
		}
		for _, e := range evs {
			byFamily[e.Family].repair.Store(true)
		}
	}, b.resyncNow)
}
