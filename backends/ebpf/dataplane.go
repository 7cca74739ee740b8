package ebpf

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// ServiceValue is the services map's value for one frontend.
type ServiceValue struct {
	// Set names the slots (Set, 0..Count-1); 0 when Count is 0.
	Set   uint32
	Count uint32
	// Drop: with Count 0, the connection fails as if timed out (kube-proxy
	// drops) rather than refused (kube-proxy rejects).
	Drop bool
	// AffinitySec is ClientIP affinity's timeout (0: none); AffinityID
	// keys the affinity map (one per Service port, stable across changes).
	AffinitySec uint32
	AffinityID  uint32
	// Masquerade: an outside frontend's packets are masqueraded to the
	// node's address (externalTrafficPolicy Cluster).
	Masquerade bool
	// NodePort: an outside frontend on a node address; with Count 0 and
	// not Drop, its packets go to the stack, which refuses them.
	NodePort bool
	// SourceRanges: new connections only from the frontend's ranges
	// (Maps.PutRanges).
	SourceRanges bool
}

// KernelSet is a backend set found in the kernel: its endpoints by slot
// (a missing slot is the zero AddrPort) and whether it has membership
// entries.
type KernelSet struct {
	Endpoints []netip.AddrPort
	Members   bool
}

// Maps is the kernel's maps as the dataplane writes them. The real one is
// the pinned BPF maps (kernel.go); FakeMaps keeps them in memory.
type Maps interface {
	// PutSet writes slots (id, i) for each endpoint and, with members, the
	// (id, endpoint) entries that let an affinity be checked against the
	// set.
	PutSet(id uint32, eps []netip.AddrPort, members bool) error
	// DeleteSet deletes what PutSet wrote (entries already gone are not an
	// error).
	DeleteSet(id uint32, eps []netip.AddrPort, members bool) error
	// PutService writes (or replaces) a frontend's entry.
	PutService(f Frontend, v ServiceValue) error
	// DeleteService deletes a frontend's entry; a missing one is not an error.
	DeleteService(f Frontend) error
	// Dump reads back the services and the sets, for a reset.
	Dump() (map[Frontend]ServiceValue, map[uint32]KernelSet, error)
	// DumpServices reads back the services only, for a periodic check.
	DumpServices() (map[Frontend]ServiceValue, error)
	// DumpSlots reads back every slot ((set, slot) -> endpoint), then
	// every membership entry ((set, endpoint) -> slot), for a periodic
	// check.
	DumpSlots(slot func(set, slot uint32, ep netip.AddrPort), member func(set uint32, ep netip.AddrPort, slot uint32)) error
	// PutRanges writes client prefixes allowed to reach an outside
	// frontend (loadBalancerSourceRanges), DeleteRanges deletes them
	// (missing ones are not an error), DumpRanges reads them back.
	PutRanges(f Frontend, ps []netip.Prefix) error
	DeleteRanges(f Frontend, ps []netip.Prefix) error
	DumpRanges() (map[Frontend][]netip.Prefix, error)
}

// liveSet is a backend set as written.
type liveSet struct {
	id      uint32 // 0: empty, no slots
	set     Set
	members bool
	// distinct is the number of membership entries written (the distinct
	// endpoints), when members.
	distinct uint32
	// slotsOK and membersOK count the entries a periodic check found
	// right (checkSets).
	slotsOK, membersOK uint32
}

func newLiveSet(s Set, members bool) *liveSet {
	ls := &liveSet{set: s, members: members}
	if members {
		seen := make(map[netip.AddrPort]bool, len(s.Endpoints))
		for _, ep := range s.Endpoints {
			seen[ep] = true
		}
		ls.distinct = uint32(len(seen))
	}
	return ls
}

// LinkChecker verifies the programs' links at each periodic sync, and
// repairs what is not as it should be (Objects.CheckLinks).
type LinkChecker interface {
	CheckLinks() (repaired []string, err error)
}

// Dataplane turns the view into map entries, one Service at a time, in an
// order that never leaves a frontend without its endpoints: a changed set is
// written under a new id, the frontends are then switched to it (each with
// one map update, which the kernel applies atomically), and only then is the
// old set deleted. A socket that connects meanwhile sees the old set or the
// new one, never a mix and never nothing.
type Dataplane struct {
	m Maps

	services map[backend.ServiceKey]*Rendered
	written  map[Frontend]ServiceValue
	ranges   map[Frontend][]netip.Prefix // written source ranges, sorted
	owners   map[Frontend]backend.ServiceKey
	sets     map[string]*liveSet
	setIDs   idPool
	affinity map[string]uint32 // Service port -> affinity id
	affIDs   idPool

	// Families are the IP families programmed (nil: both); a Service of
	// another family is not written (and deleted if it was).
	Families []localv1.IPFamily
	// NodePorts decides the node addresses of the NodePorts (nil: the
	// node's primary address of each family).
	NodePorts *NodePortAddrs

	// Conflicts lists the frontends the last Sync found claimed by two
	// Services (the first keeps it); Sync logs them.
	Conflicts []string
	// full: the last Sync rewrote every entry (a reset, or a resync that
	// found the kernel's maps changed behind kpng's back).
	full bool

	// sockets destroys the sockets a sync left connected to endpoints
	// that no longer serve (SetSocketDestroyer; nil: none are); stale
	// tracks which those are (stale.go).
	sockets SocketDestroyer
	stale   staleTracker

	// links, if set, is checked at each periodic sync (SetLinkChecker).
	links LinkChecker
}

// SetLinkChecker makes each periodic sync (Changes.Resync) verify the
// programs' links with c and repair them.
func (d *Dataplane) SetLinkChecker(c LinkChecker) { d.links = c }

// NewDataplane returns a dataplane writing to m. Its first Sync must be a
// reset, which reads back what m holds.
func NewDataplane(m Maps) *Dataplane {
	d := &Dataplane{m: m, stale: newStaleTracker()}
	d.forget()
	return d
}

func (d *Dataplane) forget() {
	d.services = map[backend.ServiceKey]*Rendered{}
	d.written = map[Frontend]ServiceValue{}
	d.ranges = map[Frontend][]netip.Prefix{}
	d.owners = map[Frontend]backend.ServiceKey{}
	d.sets = map[string]*liveSet{}
	d.affinity = map[string]uint32{}
	d.setIDs = newIDPool()
	d.affIDs = newIDPool()
	d.Conflicts = nil
}

// Sync implements backend.Backend. After a sync that succeeded, the
// sockets it left connected to endpoints that no longer serve are
// destroyed (SetSocketDestroyer); a failure there is logged and retried
// after the next sync, never returned.
func (d *Dataplane) Sync(ctx context.Context, st *backend.State, ch backend.Changes) error {
	if ch.Resync && d.links != nil {
		d.checkLinks(ctx)
	}
	if err := d.sync(ctx, st, ch); err != nil {
		return err
	}
	d.destroyStale(ctx)
	return nil
}

func (d *Dataplane) sync(ctx context.Context, st *backend.State, ch backend.Changes) error {
	d.full, d.Conflicts = false, nil
	defer func() {
		for _, c := range d.Conflicts {
			klog.FromContext(ctx).Info("A frontend is claimed by two Services; the first keeps it", "conflict", c)
		}
	}()
	// Node ports follow the host's addresses too (--nodeport-addresses
	// CIDRs), read again when kube-proxy's would be.
	addrsChanged := false
	if ch.Reset || ch.Resync || ch.NodeChanged {
		var err error
		if addrsChanged, err = d.NodePorts.Refresh(); err != nil {
			return fmt.Errorf("node port addresses: %w", err)
		}
	}
	if ch.Reset {
		d.full = true
		return d.reset(st)
	}
	if ch.Resync {
		same, err := d.check()
		if err != nil {
			return err
		}
		if !same {
			d.full = true
			return d.reset(st)
		}
		if err := d.checkSets(ctx); err != nil {
			return err
		}
	}
	keys := append(slices.Clone(ch.Set), ch.Deleted...)
	if ch.NodeChanged || addrsChanged { // node ports follow the node's addresses
		keys = slices.AppendSeq(keys, maps.Keys(st.Services))
		keys = slices.AppendSeq(keys, maps.Keys(d.services))
	}
	slices.SortFunc(keys, backend.ServiceKey.Compare)
	for _, k := range slices.Compact(keys) {
		if err := d.applyFromState(st, k); err != nil {
			return err
		}
	}
	return nil
}

// LastSyncFull reports whether the last Sync rewrote every entry, for
// backend.Options.LastSyncFull.
func (d *Dataplane) LastSyncFull() bool { return d.full }

// check compares the services map with what was written: a periodic resync
// repairs (with a reset) a map changed by hand; the sets are checked next
// (checkSets).
func (d *Dataplane) check() (bool, error) {
	kSvcs, err := d.m.DumpServices()
	if err != nil {
		return false, fmt.Errorf("reading the maps: %w", err)
	}
	return maps.Equal(kSvcs, d.written), nil
}

// checkSets reads the slots and membership entries back (batch reads)
// and rewrites, in place, each set of kpng's that lacks an entry or holds
// a wrong one: changed behind kpng's back. A set is rewritten with the
// entries kpng wrote, under its id; nothing is deleted, so no frontend
// loses an endpoint it still has, and each entry goes from missing (or
// wrong) to right in one update. Entries of sets that kpng did not write
// are left alone: no frontend reads them (a reset deletes them). The cost
// is the batch reads and one pass over the entries read and the sets
// written.
func (d *Dataplane) checkSets(ctx context.Context) error {
	// The sets by id: ids are handed out from 1 (idPool), so most are
	// found in a slice indexed by id, cheaper than a map for every entry
	// read. An id the pool took over from the kernel (a reset releases the
	// ids of the stale sets it deletes) may be any number: those few are
	// in a map, never sizing the slice.
	dense := make([]*liveSet, min(4*len(d.sets)+64, 1<<22))
	var sparse map[uint32]*liveSet
	var all []*liveSet
	for _, ls := range d.sets {
		if ls.id == 0 {
			continue
		}
		ls.slotsOK, ls.membersOK = 0, 0
		all = append(all, ls)
		if ls.id < uint32(len(dense)) {
			dense[ls.id] = ls
			continue
		}
		if sparse == nil {
			sparse = map[uint32]*liveSet{}
		}
		sparse[ls.id] = ls
	}
	set := func(id uint32) *liveSet {
		if id < uint32(len(dense)) {
			return dense[id]
		}
		return sparse[id] // nil: not kpng's
	}
	err := d.m.DumpSlots(func(id, slot uint32, ep netip.AddrPort) {
		if ls := set(id); ls != nil && slot < uint32(len(ls.set.Endpoints)) && ls.set.Endpoints[slot] == ep {
			ls.slotsOK++
		}
	}, func(id uint32, ep netip.AddrPort, slot uint32) {
		// A membership entry is right when it names a slot that holds
		// its endpoint: the program then finds that endpoint.
		if ls := set(id); ls != nil && ls.members && slot < uint32(len(ls.set.Endpoints)) && ls.set.Endpoints[slot] == ep {
			ls.membersOK++
		}
	})
	if err != nil {
		return fmt.Errorf("reading the sets back: %w", err)
	}
	var damaged []*liveSet
	for _, ls := range all {
		if ls.slotsOK != uint32(len(ls.set.Endpoints)) || (ls.members && ls.membersOK != ls.distinct) {
			damaged = append(damaged, ls)
		}
	}
	if len(damaged) == 0 {
		return nil
	}
	slices.SortFunc(damaged, func(a, b *liveSet) int { return cmp.Compare(a.id, b.id) })
	var ids []uint32
	entries := 0
	for _, ls := range damaged {
		if err := d.m.PutSet(ls.id, ls.set.Endpoints, ls.members); err != nil {
			return fmt.Errorf("repairing set %d: %w", ls.id, err)
		}
		ids = append(ids, ls.id)
		entries += len(ls.set.Endpoints) - int(ls.slotsOK)
		if ls.members {
			entries += int(ls.distinct) - int(ls.membersOK)
		}
	}
	var frontends []string
	for _, f := range sortedFrontends(d.written) {
		if _, ok := slices.BinarySearch(ids, d.written[f].Set); ok && d.written[f].Count > 0 {
			frontends = append(frontends, f.String())
		}
	}
	klog.FromContext(ctx).Info("Repaired backend sets changed behind kpng's back", "sets", ids, "entries", entries, "frontends", frontends)
	return nil
}

// checkLinks verifies the programs' links and repairs them (d.links). A
// failure is logged, never returned: the sync's map writes do not depend
// on it, and the next periodic sync tries again.
func (d *Dataplane) checkLinks(ctx context.Context) {
	start := time.Now()
	repaired, err := d.links.CheckLinks()
	log := klog.FromContext(ctx)
	if len(repaired) > 0 {
		log.Info("Repaired the programs' links, changed behind kpng's back", "links", repaired, "took", time.Since(start))
	}
	if err != nil {
		log.Error(err, "Failed to repair the programs' links; will try again at the next periodic sync")
	}
}

func (d *Dataplane) applyFromState(st *backend.State, k backend.ServiceKey) error {
	se := st.Services[k]
	if se == nil || !d.programs(k.Family) {
		d.stale.update(k, nil, nil, nil)
		return d.apply(k, nil)
	}
	r, err := Render(se, d.NodePorts.Addrs(st.Node, k.Family))
	if err != nil {
		return err
	}
	if err := d.apply(k, r); err != nil {
		return err
	}
	d.stale.update(k, se, r, nil)
	return nil
}

// programs reports whether Services of family f are written.
func (d *Dataplane) programs(f localv1.IPFamily) bool {
	return d.Families == nil || slices.Contains(d.Families, f)
}

// reset makes the maps hold exactly the state, from whatever they hold
// (another run's entries, pinned): new sets are written under ids the
// kernel does not use, every frontend is switched to them, and then the
// frontends and sets not in the state are deleted.
func (d *Dataplane) reset(st *backend.State) error {
	d.forget()
	kSvcs, kSets, err := d.m.Dump()
	if err != nil {
		return fmt.Errorf("reading the maps: %w", err)
	}
	kRanges, err := d.m.DumpRanges()
	if err != nil {
		return fmt.Errorf("reading the source ranges: %w", err)
	}
	for id := range kSets {
		d.setIDs.reserve(id)
	}
	// Keep each Service port's affinity id, so that affinities survive a
	// restart of kpng.
	kAff := map[Frontend]uint32{}
	for f, v := range kSvcs {
		if v.AffinityID != 0 {
			kAff[f] = v.AffinityID
		}
	}
	kernel := kernelEndpoints(kSvcs, kSets) // what sockets may be connected to (a restart)
	for _, se := range st.Sorted() {
		k := backend.KeyOf(se)
		if !d.programs(k.Family) {
			continue
		}
		r, err := Render(se, d.NodePorts.Addrs(st.Node, k.Family))
		if err != nil {
			return err
		}
		for _, f := range sortedFrontends(r.Frontends) {
			rt := r.Frontends[f]
			if id, ok := kAff[f]; ok && rt.AffinitySec > 0 && d.affinity[rt.AffinityKey] == 0 && d.affIDs.reserve(id) {
				d.affinity[rt.AffinityKey] = id
			}
		}
		if err := d.apply(k, r); err != nil {
			return err
		}
		d.stale.update(k, se, r, kernel)
	}
	d.stale.prune(func(k backend.ServiceKey) bool { return st.Services[k] != nil && d.programs(k.Family) })
	for _, f := range sortedFrontends(kSvcs) {
		if _, ok := d.owners[f]; !ok {
			if err := d.m.DeleteService(f); err != nil {
				return fmt.Errorf("deleting stale frontend %s: %w", f, err)
			}
		}
	}
	// Ranges no frontend has any more: after the frontends that used them
	// stopped filtering, or were deleted.
	for _, f := range sortedFrontends(kRanges) {
		var stale []netip.Prefix
		for _, p := range kRanges[f] {
			if _, ok := slices.BinarySearchFunc(d.ranges[f], p, comparePrefix); !ok {
				stale = append(stale, p)
			}
		}
		if len(stale) == 0 {
			continue
		}
		if err := d.m.DeleteRanges(f, stale); err != nil {
			return fmt.Errorf("deleting stale source ranges of %s: %w", f, err)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(kSets)) {
		ks := kSets[id]
		if err := d.m.DeleteSet(id, ks.Endpoints, ks.Members); err != nil {
			return fmt.Errorf("deleting stale set %d: %w", id, err)
		}
		d.setIDs.release(id)
	}
	return nil
}

// apply makes the maps implement r for Service k (nil: the Service is gone).
func (d *Dataplane) apply(k backend.ServiceKey, r *Rendered) error {
	old := d.services[k]
	if r == nil {
		r = &Rendered{}
	}
	// 1. Write the sets that are new or changed, under new ids.
	var replaced []*liveSet
	for _, name := range slices.Sorted(maps.Keys(r.Sets)) {
		s := r.Sets[name]
		members := needMembers(r, name)
		cur := d.sets[name]
		if cur != nil && cur.set.Equal(s) && cur.members == members {
			continue
		}
		ls := newLiveSet(s, members)
		if len(s.Endpoints) > 0 {
			ls.id = d.setIDs.get()
			if err := d.m.PutSet(ls.id, s.Endpoints, members); err != nil {
				d.setIDs.release(ls.id)
				return fmt.Errorf("service %s: writing set %s: %w", k, name, err)
			}
		}
		if cur != nil {
			replaced = append(replaced, cur)
		}
		d.sets[name] = ls
	}
	// 2. Switch the frontends to them.
	for _, f := range sortedFrontends(r.Frontends) {
		rt := r.Frontends[f]
		if owner, ok := d.owners[f]; ok && owner != k {
			d.Conflicts = append(d.Conflicts, fmt.Sprintf("%s: %s and %s", f, owner, k))
			continue
		}
		ls := d.sets[rt.Set]
		v := ServiceValue{Set: ls.id, Count: uint32(len(ls.set.Endpoints)), Drop: ls.set.Drop, Masquerade: rt.Masquerade, NodePort: rt.NodePort}
		if rt.AffinitySec > 0 {
			v.AffinitySec, v.AffinityID = rt.AffinitySec, d.affinityID(rt.AffinityKey)
		}
		v.SourceRanges = len(rt.SourceRanges) > 0
		// Source ranges: the new ones before the frontend filters on
		// them, the old ones deleted after it stopped.
		add, del := diffPrefixes(d.ranges[f], rt.SourceRanges)
		if len(add) > 0 {
			if err := d.m.PutRanges(f, add); err != nil {
				return fmt.Errorf("service %s: writing the source ranges of %s: %w", k, f, err)
			}
			d.ranges[f] = mergePrefixes(d.ranges[f], add)
		}
		if w, ok := d.written[f]; !ok || w != v {
			if err := d.m.PutService(f, v); err != nil {
				return fmt.Errorf("service %s: writing frontend %s: %w", k, f, err)
			}
			d.written[f], d.owners[f] = v, k
		}
		if len(del) > 0 {
			if err := d.m.DeleteRanges(f, del); err != nil {
				return fmt.Errorf("service %s: deleting source ranges of %s: %w", k, f, err)
			}
			d.ranges[f] = slices.Clone(rt.SourceRanges)
		}
		if len(d.ranges[f]) == 0 {
			delete(d.ranges, f)
		}
	}
	// 3. Delete the frontends the Service no longer has.
	if old != nil {
		for _, f := range sortedFrontends(old.Frontends) {
			if _, ok := r.Frontends[f]; ok || d.owners[f] != k {
				continue
			}
			if err := d.m.DeleteService(f); err != nil {
				return fmt.Errorf("service %s: deleting frontend %s: %w", k, f, err)
			}
			delete(d.written, f)
			delete(d.owners, f)
			if ps := d.ranges[f]; len(ps) > 0 {
				if err := d.m.DeleteRanges(f, ps); err != nil {
					return fmt.Errorf("service %s: deleting source ranges of %s: %w", k, f, err)
				}
				delete(d.ranges, f)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(old.Sets)) {
			if _, ok := r.Sets[name]; !ok {
				replaced = append(replaced, d.sets[name])
				delete(d.sets, name)
			}
		}
		for _, f := range sortedFrontends(old.Frontends) {
			rt := old.Frontends[f]
			if _, ok := r.Frontends[f]; !ok && rt.AffinitySec > 0 && !hasAffinityKey(r, rt.AffinityKey) {
				d.affIDs.release(d.affinity[rt.AffinityKey])
				delete(d.affinity, rt.AffinityKey)
			}
		}
	}
	// 4. Only now delete the sets no frontend uses any more.
	for _, ls := range replaced {
		if ls.id == 0 {
			continue
		}
		if err := d.m.DeleteSet(ls.id, ls.set.Endpoints, ls.members); err != nil {
			return fmt.Errorf("service %s: deleting set %d: %w", k, ls.id, err)
		}
		d.setIDs.release(ls.id)
	}
	if len(r.Frontends) == 0 && len(r.Sets) == 0 {
		delete(d.services, k)
	} else {
		d.services[k] = r
	}
	return nil
}

// diffPrefixes returns what want adds to have and what it drops (both
// sorted).
func diffPrefixes(have, want []netip.Prefix) (add, del []netip.Prefix) {
	for _, p := range want {
		if _, ok := slices.BinarySearchFunc(have, p, comparePrefix); !ok {
			add = append(add, p)
		}
	}
	for _, p := range have {
		if _, ok := slices.BinarySearchFunc(want, p, comparePrefix); !ok {
			del = append(del, p)
		}
	}
	return add, del
}

func mergePrefixes(a, b []netip.Prefix) []netip.Prefix {
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out)
}

func (d *Dataplane) affinityID(key string) uint32 {
	if id, ok := d.affinity[key]; ok {
		return id
	}
	id := d.affIDs.get()
	d.affinity[key] = id
	return id
}

// needMembers: a set needs membership entries when a frontend that uses
// it has affinity.
func needMembers(r *Rendered, set string) bool {
	for _, rt := range r.Frontends {
		if rt.Set == set && rt.AffinitySec > 0 {
			return true
		}
	}
	return false
}

func hasAffinityKey(r *Rendered, key string) bool {
	for _, rt := range r.Frontends {
		if rt.AffinityKey == key && rt.AffinitySec > 0 {
			return true
		}
	}
	return false
}

func sortedFrontends[V any](m map[Frontend]V) []Frontend {
	return slices.SortedFunc(maps.Keys(m), compareFrontend)
}

// idPool hands out uint32 ids from 1, reusing released ones.
type idPool struct {
	used map[uint32]bool
	free []uint32
	next uint32
}

func newIDPool() idPool { return idPool{used: map[uint32]bool{}, next: 1} }

func (p *idPool) get() uint32 {
	for len(p.free) > 0 {
		id := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		if !p.used[id] {
			p.used[id] = true
			return id
		}
	}
	for p.used[p.next] || p.next == 0 {
		p.next++
	}
	id := p.next
	p.used[id] = true
	p.next++
	return id
}

// reserve marks id used (an id found in the kernel); false if it already was.
func (p *idPool) reserve(id uint32) bool {
	if id == 0 || p.used[id] {
		return false
	}
	p.used[id] = true
	return true
}

func (p *idPool) release(id uint32) {
	if id == 0 || !p.used[id] {
		return
	}
	delete(p.used, id)
	p.free = append(p.free, id)
}
