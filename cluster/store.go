// Package cluster holds the cluster state a service proxy reads (Services,
// EndpointSlices, Nodes, ServiceCIDRs in the globalv1 model) with a revision
// that moves only when that content changes, and a bounded log of what
// changed at each revision so that consumers can catch up on just that.
package cluster

import (
	"context"
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
)

// ChangeKind says what a logged change is about.
type ChangeKind int

const (
	// ServiceChanged: a Service or one of its EndpointSlices; Key is "namespace/name".
	ServiceChanged ChangeKind = iota
	// NodeChanged: a Node; Key is its name.
	NodeChanged
	// ServiceCIDRChanged: a ServiceCIDR; Key is its name.
	ServiceCIDRChanged
)

// Change is one entry of the change log.
type Change struct {
	Rev  uint64
	Kind ChangeKind
	Key  string
}

// DefaultLogSize bounds the change log: a consumer that falls further behind
// than this many changes recomputes everything instead.
const DefaultLogSize = 1 << 16

// Store is the cluster state. It is safe for concurrent use: sources write
// with Update, consumers read with View and wait with Wait.
type Store struct {
	mu       sync.RWMutex
	services map[string]*globalv1.Service
	// slices of each service key, by slice name.
	slices map[string]map[string]*globalv1.EndpointSlice
	// service key of each slice, by "namespace/slicename", so that a slice
	// whose service label changes is moved.
	sliceOwner   map[string]string
	nodes        map[string]*globalv1.Node
	serviceCIDRs map[string]*globalv1.ServiceCIDR

	rev    uint64
	synced bool
	events uint64

	log     []Change // ring buffer
	logNext int      // index of the next write
	logLen  int

	changed chan struct{} // closed and replaced at every revision
}

// NewStore returns an empty, not yet synced store.
func NewStore() *Store {
	return &Store{
		services:     map[string]*globalv1.Service{},
		slices:       map[string]map[string]*globalv1.EndpointSlice{},
		sliceOwner:   map[string]string{},
		nodes:        map[string]*globalv1.Node{},
		serviceCIDRs: map[string]*globalv1.ServiceCIDR{},
		log:          make([]Change, DefaultLogSize),
		changed:      make(chan struct{}),
	}
}

// Key returns the key of a namespaced object.
func Key(namespace, name string) string { return namespace + "/" + name }

// Tx is a batch of writes applied atomically by Update.
type Tx struct {
	s       *Store
	changes []Change
	seen    map[Change]bool
}

func (tx *Tx) record(kind ChangeKind, key string) {
	c := Change{Kind: kind, Key: key}
	if tx.seen[c] {
		return
	}
	if tx.seen == nil {
		tx.seen = map[Change]bool{}
	}
	tx.seen[c] = true
	tx.changes = append(tx.changes, c)
}

// SetService stores a Service (replacing any with the same key).
func (tx *Tx) SetService(svc *globalv1.Service) {
	tx.s.events++
	key := Key(svc.Namespace, svc.Name)
	if old, ok := tx.s.services[key]; ok && proto.Equal(old, svc) {
		return
	}
	tx.s.services[key] = svc
	tx.record(ServiceChanged, key)
}

// DeleteService removes a Service.
func (tx *Tx) DeleteService(namespace, name string) {
	tx.s.events++
	key := Key(namespace, name)
	if _, ok := tx.s.services[key]; !ok {
		return
	}
	delete(tx.s.services, key)
	tx.record(ServiceChanged, key)
}

// SetEndpointSlice stores an EndpointSlice under its Service.
func (tx *Tx) SetEndpointSlice(sl *globalv1.EndpointSlice) {
	tx.s.events++
	sliceKey := Key(sl.Namespace, sl.Name)
	owner := Key(sl.Namespace, sl.ServiceName)
	if prev, ok := tx.s.sliceOwner[sliceKey]; ok && prev != owner {
		tx.removeSlice(prev, sl.Name)
	} else if old := tx.s.slices[owner][sl.Name]; old != nil && proto.Equal(old, sl) {
		return
	}
	bySlice := tx.s.slices[owner]
	if bySlice == nil {
		bySlice = map[string]*globalv1.EndpointSlice{}
		tx.s.slices[owner] = bySlice
	}
	bySlice[sl.Name] = sl
	tx.s.sliceOwner[sliceKey] = owner
	tx.record(ServiceChanged, owner)
}

// DeleteEndpointSlice removes an EndpointSlice.
func (tx *Tx) DeleteEndpointSlice(namespace, name string) {
	tx.s.events++
	sliceKey := Key(namespace, name)
	owner, ok := tx.s.sliceOwner[sliceKey]
	if !ok {
		return
	}
	delete(tx.s.sliceOwner, sliceKey)
	tx.removeSlice(owner, name)
}

func (tx *Tx) removeSlice(owner, name string) {
	bySlice := tx.s.slices[owner]
	delete(bySlice, name)
	if len(bySlice) == 0 {
		delete(tx.s.slices, owner)
	}
	tx.record(ServiceChanged, owner)
}

// SetNode stores a Node.
func (tx *Tx) SetNode(n *globalv1.Node) {
	tx.s.events++
	if old, ok := tx.s.nodes[n.Name]; ok && proto.Equal(old, n) {
		return
	}
	tx.s.nodes[n.Name] = n
	tx.record(NodeChanged, n.Name)
}

// DeleteNode removes a Node.
func (tx *Tx) DeleteNode(name string) {
	tx.s.events++
	if _, ok := tx.s.nodes[name]; !ok {
		return
	}
	delete(tx.s.nodes, name)
	tx.record(NodeChanged, name)
}

// SetServiceCIDR stores a ServiceCIDR.
func (tx *Tx) SetServiceCIDR(c *globalv1.ServiceCIDR) {
	tx.s.events++
	if old, ok := tx.s.serviceCIDRs[c.Name]; ok && proto.Equal(old, c) {
		return
	}
	tx.s.serviceCIDRs[c.Name] = c
	tx.record(ServiceCIDRChanged, c.Name)
}

// DeleteServiceCIDR removes a ServiceCIDR.
func (tx *Tx) DeleteServiceCIDR(name string) {
	tx.s.events++
	if _, ok := tx.s.serviceCIDRs[name]; !ok {
		return
	}
	delete(tx.s.serviceCIDRs, name)
	tx.record(ServiceCIDRChanged, name)
}

// Update applies a batch of writes atomically. The revision moves (by one)
// only if the batch changed the content. Readers never see half a batch.
// It returns the revision that holds the batch: a view computed at that
// revision or a later one has it.
func (s *Store) Update(fn func(tx *Tx)) (rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := &Tx{s: s}
	// Even if fn panics: its writes so far are in the maps, so they get a
	// revision and a log entry like any other, and the lock is released.
	defer func() {
		tx.commit()
		rev = s.rev
	}()
	fn(tx)
	return
}

// commit gives the batch's changes, if any, a revision and logs them.
func (tx *Tx) commit() {
	s := tx.s
	if len(tx.changes) == 0 {
		return
	}
	s.rev++
	for _, c := range tx.changes {
		c.Rev = s.rev
		s.log[s.logNext] = c
		s.logNext = (s.logNext + 1) % len(s.log)
		if s.logLen < len(s.log) {
			s.logLen++
		}
	}
	s.wakeLocked()
}

// MarkSynced says the source has delivered a complete state; consumers wait
// for it so that they never publish a partial view. Becoming synced moves
// the revision, so that Wait returns even for an empty cluster.
func (s *Store) MarkSynced() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.synced {
		s.synced = true
		s.rev++
		s.wakeLocked()
	}
}

func (s *Store) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wait blocks until the store is synced and its revision is past rev, and
// returns the new revision.
func (s *Store) Wait(ctx context.Context, rev uint64) (uint64, error) {
	for {
		s.mu.RLock()
		cur, synced, ch := s.rev, s.synced, s.changed
		s.mu.RUnlock()
		if synced && cur > rev {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ch:
		}
	}
}

// Stats are the store's counters.
type Stats struct {
	// Events is the number of writes received (including no-op ones).
	Events uint64
	// Revision is the number of batches that changed the content.
	Revision uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{Events: s.events, Revision: s.rev}
}

// View runs fn with a consistent read-only view of the store.
func (s *Store) View(fn func(r Reader)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(Reader{s})
}

// Reader reads the store inside View. It must not be kept after View returns.
type Reader struct{ s *Store }

// Revision is the store's revision.
func (r Reader) Revision() uint64 { return r.s.rev }

// Synced reports whether a complete state was delivered.
func (r Reader) Synced() bool { return r.s.synced }

// Service returns a Service by key, or nil.
func (r Reader) Service(key string) *globalv1.Service { return r.s.services[key] }

// EndpointSlices returns the slices of a service key, in no particular order.
func (r Reader) EndpointSlices(key string) []*globalv1.EndpointSlice {
	bySlice := r.s.slices[key]
	out := make([]*globalv1.EndpointSlice, 0, len(bySlice))
	for _, sl := range bySlice {
		out = append(out, sl)
	}
	return out
}

// Node returns a Node by name, or nil.
func (r Reader) Node(name string) *globalv1.Node { return r.s.nodes[name] }

// ServiceCIDRs calls fn for every ServiceCIDR.
func (r Reader) ServiceCIDRs(fn func(*globalv1.ServiceCIDR)) {
	for _, c := range r.s.serviceCIDRs {
		fn(c)
	}
}

// ServiceKeys calls fn for the key of every Service and every service key
// that has EndpointSlices (a slice may arrive before its Service).
func (r Reader) ServiceKeys(fn func(key string)) {
	for k := range r.s.services {
		fn(k)
	}
	for k := range r.s.slices {
		if _, ok := r.s.services[k]; !ok {
			fn(k)
		}
	}
}

// Nodes calls fn for every Node.
func (r Reader) Nodes(fn func(*globalv1.Node)) {
	for _, n := range r.s.nodes {
		fn(n)
	}
}

// ChangesSince calls fn for every change after revision rev, oldest first.
// It returns false, without calling fn, when the log no longer reaches back
// to rev: the caller must then recompute from the full state.
func (r Reader) ChangesSince(rev uint64, fn func(Change)) bool {
	s := r.s
	if rev >= s.rev {
		return true
	}
	start := (s.logNext - s.logLen + len(s.log)) % len(s.log)
	at := func(i int) Change { return s.log[(start+i)%len(s.log)] }
	// Complete only if nothing after rev was overwritten: the log never
	// wrapped, or its oldest entry is at or before rev.
	if s.logLen == len(s.log) && at(0).Rev > rev {
		return false
	}
	first := sort.Search(s.logLen, func(i int) bool { return at(i).Rev > rev })
	for i := first; i < s.logLen; i++ {
		fn(at(i))
	}
	return true
}
