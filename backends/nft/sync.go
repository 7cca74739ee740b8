package nft

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
	"github.com/kpng/kpng/proxyutil/metrics"
)

// Backend programs a node's services into one nftables table per family.
type Backend struct {
	cfg    Config
	tables []*table
	log    logr.Logger

	// interfaceAddrs lists the node's local addresses (for CIDR
	// --nodeport-addresses); a variable for tests.
	interfaceAddrs func() ([]netip.Addr, error)
	localAddrs     []netip.Addr // as last read
	now            func() time.Time

	// Last reports the last sync's transactions, one per table (for tests
	// and benchmarks).
	Last []SyncStats
	// full: the last sync was a full one in some table.
	full bool
	// watch hears of changes made behind the backend's back; repairing
	// is set during a Sync that repairs what it reported.
	watch     kernelWatch
	repairing bool
}

// SyncStats describes the transaction one sync ran on one table.
type SyncStats struct {
	Family        string
	Full          bool
	Operations    int
	ChainsWritten int
	ChainsEmptied int
	ElemsAdded    int
	ElemsDeleted  int
	StaleDeleted  int
	// Netlink: the transaction was written through netlink, not nft.
	Netlink bool
	// Fallback says why an incremental transaction went through nft.
	Fallback string
}

// NewBackend returns a backend writing to tables (see Plugin.Open).
func NewBackend(cfg Config, tables ...*table) *Backend {
	return &Backend{cfg: cfg, tables: tables, log: logr.Discard(), interfaceAddrs: host.InterfaceAddrs, now: time.Now}
}

// Sync implements backend.Backend.
func (b *Backend) Sync(ctx context.Context, state *backend.State, changes backend.Changes) error {
	start := b.now()
	if !b.cfg.nodePorts(false).Primary && (changes.Reset || changes.Resync || changes.NodeChanged || b.localAddrs == nil) {
		addrs, err := b.interfaceAddrs()
		if err != nil {
			return fmt.Errorf("listing local addresses for --nodeport-addresses: %w", err)
		}
		b.localAddrs = addrs
	}
	b.Last = b.Last[:0]
	b.full = false
	// A change the kernel reported: this Resync reads every table back.
	b.repairing = changes.Resync && b.watch.repair.Swap(false)
	var errs []error
	for _, t := range b.tables {
		st, err := b.syncTable(ctx, t, state, changes)
		b.full = b.full || st.Full
		if err != nil {
			t.synced = false
			errs = append(errs, fmt.Errorf("%s: %w", t.fam, err))
			continue
		}
		b.Last = append(b.Last, st)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, st := range b.Last {
		switch {
		case st.Full && changes.Reset:
			b.log.Info("Synced nftables table", "family", st.Family, "operations", st.Operations, "chainsWritten", st.ChainsWritten, "took", b.now().Sub(start))
		case st.Full && st.Operations > 0:
			b.log.Info("Repaired nftables table changed behind kpng's back", "family", st.Family, "operations", st.Operations, "chainsWritten", st.ChainsWritten)
		default:
			b.log.V(2).Info("Synced nftables table", "family", st.Family, "full", st.Full, "operations", st.Operations, "netlink", st.Netlink, "took", b.now().Sub(start))
		}
	}
	b.watch.startAfterFirstSync()
	return nil
}

func (b *Backend) syncTable(ctx context.Context, t *table, state *backend.State, changes backend.Changes) (SyncStats, error) {
	now := b.now()
	e := b.env(t.fam, state)
	full := changes.Reset || !t.synced
	if changes.Resync && !full {
		full = b.fullResync(ctx, t, now)
	}
	st := SyncStats{Family: t.fam.String(), Full: full}

	if !full && len(t.stale) > 0 {
		n, err := t.deleteStale(ctx, now)
		if err != nil {
			metrics.NFTablesCleanupFailuresTotal.WithLabelValues(metrics.FamilyLabel(t.fam.model)).Inc()
			// The chains stay listed as stale and are tried again.
			b.log.Error(err, "Deleting stale chains failed; will retry", "family", t.fam.String())
		}
		st.StaleDeleted = n
	}

	parts := map[string]*part{}
	var snap *snapshot
	if full {
		t.forget()
		var err error
		if snap, err = t.read(ctx); err != nil {
			return st, err
		}
		parts[fixedOwner] = fixedPart(e)
		// What the kernel holds: endpoints keep their slots across a
		// restart or a repair too.
		held := func(id elemID) (string, bool) {
			v, ok := snap.elems[id]
			return v, ok
		}
		for k, se := range state.Services {
			if k.Family == t.fam.model {
				parts[owner(k)] = servicePart(e, se, held)
			}
		}
	} else {
		if !e.equal(t.env) {
			// The node or the flags changed what every part looks like.
			parts[fixedOwner] = fixedPart(e)
			for k, se := range state.Services {
				if k.Family == t.fam.model {
					parts[owner(k)] = servicePart(e, se, t.have)
				}
			}
		}
		for _, k := range changes.Set {
			if k.Family == t.fam.model {
				if se := state.Services[k]; se != nil {
					parts[owner(k)] = servicePart(e, se, t.have)
				}
			}
		}
		for _, k := range changes.Deleted {
			if k.Family == t.fam.model {
				parts[owner(k)] = nil
			}
		}
	}

	p := t.build(parts, full, snap)
	st.Operations = len(p.ops)
	st.ChainsWritten, st.ChainsEmptied = p.stats.chainsWritten, p.stats.chainsEmptied
	st.ElemsAdded, st.ElemsDeleted = p.stats.elemsAdded, p.stats.elemsDeleted
	// A full sync of a table that matches needs only "add table": skip it.
	if !(full && snap.exists && st.Operations == 1) && st.Operations > 0 {
		fallback, err := t.run(ctx, p)
		st.Netlink = t.nl != nil && !full && fallback == ""
		if st.Fallback = fallback; fallback != "" {
			netlinkFallbacksTotal.WithLabelValues(metrics.FamilyLabel(t.fam.model)).Inc()
			b.log.V(2).Info("Incremental transaction written by nft", "family", t.fam.String(), "reason", fallback)
		}
		if err != nil {
			metrics.NFTablesSyncFailuresTotal.WithLabelValues(metrics.FamilyLabel(t.fam.model)).Inc()
			if v := b.log.V(4); v.Enabled() { // a cold sync's text is 8 MB
				v.Info("Failed transaction", "family", t.fam.String(), "transaction", transaction(t.nft, p.ops).String())
			}
			return st, fmt.Errorf("nftables transaction (%d operations): %w", st.Operations, err)
		}
	} else {
		st.Operations = 0
	}
	t.commit(p, e, now)
	return st, nil
}

// fullResync decides whether a periodic sync reads t back and repairs it:
// once per FullSyncPeriod, and whenever the cheap check (see check.go)
// finds the table changed behind kpng's back. Otherwise the periodic sync
// is an incremental one (it still deletes stale chains).
func (b *Backend) fullResync(ctx context.Context, t *table, now time.Time) bool {
	if b.cfg.FullSyncPeriod <= 0 || now.Sub(t.lastFull) >= b.cfg.FullSyncPeriod || b.repairing {
		return true
	}
	problem, err := t.checkFixed(ctx)
	switch {
	case err != nil:
		b.log.Error(err, "Checking the nftables table failed; reading it back instead", "family", t.fam.String())
		return true
	case problem != "":
		b.log.Info("The nftables table was changed behind kpng's back; reading it back to repair it", "family", t.fam.String(), "change", problem)
		return true
	}
	return false
}

// LastSyncFull is backend.Options.LastSyncFull: whether the last Sync
// rewrote (or read back and repaired) a whole table.
func (b *Backend) LastSyncFull() bool { return b.full }

func owner(k backend.ServiceKey) string { return k.Namespace + "/" + k.Name }

// env computes what the rules of family f depend on besides the services.
func (b *Backend) env(f family, state *backend.State) *env {
	c := &b.cfg
	bits := host.MasqueradeMark(c.MasqueradeBit)
	e := &env{family: f, masqueradeBits: bits, masqueradeMark: markHex(bits), masqueradeRule: setMark{false, bits}.text(), masqueradeAll: c.MasqueradeAll}
	var nodeAddrs, podCIDRs []string
	if state.Node != nil {
		nodeAddrs, podCIDRs = state.Node.Addresses, state.Node.PodCidrs
	}
	for _, s := range nodeAddrs {
		if a, ok := parseAddr(s, f); ok {
			e.nodeIP = a
			break
		}
	}

	is6 := f.model == ipv6.model
	e.local = host.DetectLocal(&c.Config, is6, podCIDRs)
	e.ifLocal, e.ifNotLocal = localMatch(f, e.local), notLocalMatch(f, e.local)

	// Node ports: nftables mode never accepts them on loopback addresses.
	np := c.nodePorts(is6)
	e.nodePortAll = np.AllAddresses(e.nodeIP)
	if !e.nodePortAll {
		for _, a := range np.Addresses(is6, e.nodeIP, b.localAddrs) {
			if !a.IsLoopback() {
				e.nodePortIPs = append(e.nodePortIPs, a.String())
			}
		}
		slices.Sort(e.nodePortIPs)
	}

	for _, s := range state.ServiceCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil && f.has(p.Addr()) {
			e.serviceCIDRs = append(e.serviceCIDRs, p.Masked().String())
		}
	}
	return e
}

// nodePorts is --nodeport-addresses for a family.
func (c *Config) nodePorts(ipv6 bool) host.NodePorts {
	return host.NodePortsOf(c.NodePortAddresses, ipv6)
}
