// Package conntrack removes stale conntrack entries after a sync, as
// kube-proxy 1.36 does (pkg/proxy/conntrack/cleanup.go).
//
// UDP has no connection to end: once conntrack has chosen an endpoint for a
// client's flow (by DNAT), every later packet of that flow goes there, even
// after the endpoint is gone, for as long as the client keeps sending. So
// after each sync that changed a UDP service, the family's conntrack table
// is listed once over netlink and every flow whose original destination is
// a service IP:port or a node port of a UDP service port, and whose reply
// source is not one of that port's serving endpoints, is deleted; see
// [Filter].
//
// Usage, one cleaner per family, fed by the backend's OnSync hook:
//
//	ct4 := conntrack.NewCleaner(localv1.IPFamily_IPV4)
//	ct6 := conntrack.NewCleaner(localv1.IPFamily_IPV6)
//	opts.OnSync = func(r backend.SyncResult) { ct4.OnSync(r); ct6.OnSync(r) }
//
// OnSync cleans only after a successful sync that reset the state or set
// an entry of the cleaner's family with a UDP port; [Cleaner.Clean] cleans
// unconditionally and returns what it did.
//
// After a full sync (a repair, the first sync, a retry after a refused
// transaction: any sync that may have put missing rules back), the cleanup
// also deletes the TCP handshakes that were never NATed, which kube-proxy
// leaves: a client reusing such a flow's tuple would not be NATed for two
// minutes (see [Filter.WithHandshakes]).
package conntrack

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/metrics"
)

// Cleaner deletes the stale conntrack entries of one IP family.
type Cleaner struct {
	family localv1.IPFamily
	handle *netlink.Handle
	// filter follows the synced state through OnSync.
	filter *Filter
	// SCTP also cleans SCTP service ports (kube-proxy 1.36 cleans UDP only).
	SCTP bool
}

// Result is what one cleanup did.
type Result struct {
	// Deleted is the number of flows deleted.
	Deleted int
	// Duration is how long the cleanup took.
	Duration time.Duration
}

// NewCleaner returns a cleaner of family's table in the current network
// namespace.
func NewCleaner(family localv1.IPFamily) *Cleaner {
	return &Cleaner{family: family, handle: &netlink.Handle{}}
}

// NewCleanerAt returns a cleaner of family's table in network namespace
// ns; Close it when done.
func NewCleanerAt(family localv1.IPFamily, ns netns.NsHandle) (*Cleaner, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("conntrack: netlink handle in %s: %w", ns, err)
	}
	return &Cleaner{family: family, handle: h}, nil
}

// Close releases the cleaner's netlink socket.
func (c *Cleaner) Close() { c.handle.Close() }

// NeedsCleanup reports whether the sync of changes may have left stale
// flows in family: the state was reset, or a set entry of the family has a
// UDP (or, with sctp, SCTP) port. Deleted entries need nothing: flows to a
// service that no longer exists are not matched anyway.
func NeedsCleanup(family localv1.IPFamily, state *backend.State, ch backend.Changes, sctp bool) bool {
	if ch.Reset {
		return true
	}
	for _, k := range ch.Set {
		if k.Family != family {
			continue
		}
		se := state.Services[k]
		if se == nil {
			continue
		}
		for _, p := range se.Service.Ports {
			if p.Protocol == localv1.Protocol_UDP || (sctp && p.Protocol == localv1.Protocol_SCTP) {
				return true
			}
		}
	}
	return false
}

// OnSync is a backend.Options.OnSync hook: it cleans after a successful
// sync that needs it (see NeedsCleanup), or that was full (then also the
// TCP handshakes never NATed, as CleanAfterFullSync), and logs a failure.
// Its filter follows the changes, so a sync that changed one service costs
// one service's work plus the table dump, whatever the number of services.
func (c *Cleaner) OnSync(res backend.SyncResult) {
	if res.Err != nil {
		return
	}
	if c.filter == nil {
		c.filter = NewFilter(res.State, c.family, c.SCTP)
	} else {
		c.filter.Update(res.State, res.Changes)
	}
	filter := c.filter
	switch {
	case res.Full:
		filter = filter.WithHandshakes(res.State)
	case !NeedsCleanup(c.family, res.State, res.Changes, c.SCTP):
		return
	}
	if _, err := c.clean(filter); err != nil {
		klog.ErrorS(err, "Failed to clean stale conntrack entries", "ipFamily", metrics.FamilyLabel(c.family))
	}
}

// maxAttempts bounds the retries of a table dump the kernel interrupted
// (the table changed while it was read).
const maxAttempts = 3

// Clean deletes the family's stale flows for state, listing the table once
// (again only if the kernel interrupted the dump), and records kube-proxy's
// conntrack_reconciler metrics.
func (c *Cleaner) Clean(state *backend.State) (Result, error) {
	return c.clean(NewFilter(state, c.family, c.SCTP))
}

// CleanAfterFullSync is Clean as OnSync does it after a full sync: it
// also deletes the TCP handshakes never NATed (see Filter.WithHandshakes).
func (c *Cleaner) CleanAfterFullSync(state *backend.State) (Result, error) {
	return c.clean(NewFilter(state, c.family, c.SCTP).WithHandshakes(state))
}

func (c *Cleaner) clean(filter *Filter) (Result, error) {
	start := time.Now()
	label := metrics.FamilyLabel(c.family)
	var res Result
	var err error
	if !filter.Empty() {
		af := netlink.InetFamily(unix.AF_INET)
		if c.family == localv1.IPFamily_IPV6 {
			af = unix.AF_INET6
		}
		for range maxAttempts {
			var n uint
			// DeleteFilters dumps the table once and deletes each match.
			n, err = c.handle.ConntrackDeleteFilters(netlink.ConntrackTable, af, filter)
			res.Deleted += int(n)
			if !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
	}
	res.Duration = time.Since(start)
	metrics.ReconcileConntrackFlowsLatency.WithLabelValues(label).Observe(res.Duration.Seconds())
	metrics.ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues(label).Add(float64(res.Deleted))
	if err != nil {
		return res, fmt.Errorf("conntrack %s: deleting stale flows (%d deleted): %w", label, res.Deleted, err)
	}
	klog.V(4).InfoS("Cleaned stale conntrack entries", "ipFamily", label, "deleted", res.Deleted, "took", res.Duration)
	return res, nil
}
