// Package diffstore turns successive full states into changes: write the
// whole state in rounds (Reset, Set every entry, Done) and the store tells
// which entries were created, updated, deleted or left unchanged since the
// previous round. It is the helper of full-state backends that KEP-2104
// describes: a backend called with its node's whole view renders each
// service into whatever its dataplane needs (rules, map entries), writes
// them to a Store, and sends the kernel only what changed.
//
// Values are compared by a hash: a value whose hash did not change is
// unchanged. Use a hash of every field that the dataplane reads (HashProto
// hashes a protobuf message's deterministic encoding).
package diffstore

import (
	"hash/fnv"

	"google.golang.org/protobuf/proto"
)

// State is what a round did to an entry.
type State int

const (
	// Unchanged: set with a value of the same hash as before.
	Unchanged State = iota
	// Created: set, and absent from the previous round.
	Created
	// Updated: set with a value of another hash.
	Updated
	// Deleted: present in the previous round, not set in this one.
	Deleted
)

func (s State) String() string {
	switch s {
	case Unchanged:
		return "unchanged"
	case Created:
		return "created"
	case Updated:
		return "updated"
	default:
		return "deleted"
	}
}

// Item is one entry of a Store.
type Item[K comparable, V any] struct {
	Key K
	// Value is the value of the last round (of the previous one, for a
	// deleted entry).
	Value V
	// State is what the last finished round did to the entry.
	State State

	prev    uint64 // hash at the end of the previous round
	hasPrev bool
	cur     uint64 // hash of this round's value
	set     bool   // set in this round
}

// Store holds the entries of the last round and what the round changed.
// A new Store is in its first round. It is not safe for concurrent use.
type Store[K comparable, V any] struct {
	hash    func(V) uint64
	items   map[K]*Item[K, V]
	open    bool
	changed []*Item[K, V] // created, updated and deleted entries of the last round
}

// New returns a store comparing values with hash.
func New[K comparable, V any](hash func(V) uint64) *Store[K, V] {
	return &Store[K, V]{hash: hash, items: map[K]*Item[K, V]{}, open: true}
}

// Hasher is a value that hashes itself.
type Hasher interface{ Hash() uint64 }

// NewHashed returns a store of values that hash themselves.
func NewHashed[K comparable, V Hasher]() *Store[K, V] {
	return New[K](func(v V) uint64 { return v.Hash() })
}

// HashProto hashes a protobuf message's deterministic encoding.
func HashProto(m proto.Message) uint64 {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic("diffstore: " + err.Error()) // only invalid UTF-8 fails: a bug
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// Reset starts a new round: entries deleted by the last round are dropped,
// and every entry not Set before Done will be deleted. Calling Reset
// before Done abandons the round's writes: they are not undone.
func (s *Store[K, V]) Reset() {
	for k, it := range s.items {
		if it.State == Deleted {
			delete(s.items, k)
			continue
		}
		it.set = false
	}
	s.changed = s.changed[:0]
	s.open = true
}

// Set writes an entry in the current round. Setting a key twice in a round
// keeps the last value.
func (s *Store[K, V]) Set(k K, v V) {
	if !s.open {
		panic("diffstore: Set after Done without Reset")
	}
	it := s.items[k]
	if it == nil {
		it = &Item[K, V]{Key: k}
		s.items[k] = it
	}
	it.Value, it.cur, it.set = v, s.hash(v), true
}

// Done ends the round and computes each entry's State.
func (s *Store[K, V]) Done() {
	if !s.open {
		return
	}
	s.open = false
	s.changed = s.changed[:0]
	for k, it := range s.items {
		switch {
		case !it.set && !it.hasPrev: // never finished a round: forget it
			delete(s.items, k)
			continue
		case !it.set:
			it.State = Deleted
		case !it.hasPrev:
			it.State = Created
		case it.cur != it.prev:
			it.State = Updated
		default:
			it.State = Unchanged
		}
		if it.State != Unchanged {
			s.changed = append(s.changed, it)
		}
		if it.set {
			it.prev, it.hasPrev = it.cur, true
		}
	}
}

// Get returns the value of a key in the last round (a deleted entry's
// last value, until the next Reset), or in the current one once Set.
func (s *Store[K, V]) Get(k K) (V, bool) {
	it := s.items[k]
	if it == nil {
		var zero V
		return zero, false
	}
	return it.Value, true
}

// Changed returns the entries the last round created, updated or deleted,
// in no particular order. The slice is valid until the next Reset.
func (s *Store[K, V]) Changed() []*Item[K, V] { return s.changed }

// HasChanges reports whether the last round changed anything.
func (s *Store[K, V]) HasChanges() bool { return len(s.changed) != 0 }

// Created returns the entries the last round created.
func (s *Store[K, V]) Created() []*Item[K, V] { return s.filter(Created) }

// Updated returns the entries the last round updated.
func (s *Store[K, V]) Updated() []*Item[K, V] { return s.filter(Updated) }

// Deleted returns the entries the last round deleted, with their last value.
func (s *Store[K, V]) Deleted() []*Item[K, V] { return s.filter(Deleted) }

// Unchanged returns the entries the last round set to the same value.
func (s *Store[K, V]) Unchanged() []*Item[K, V] {
	var out []*Item[K, V]
	for _, it := range s.items {
		if !s.open && it.State == Unchanged {
			out = append(out, it)
		}
	}
	return out
}

// Len is the number of entries of the last round (without deleted ones).
func (s *Store[K, V]) Len() int {
	n := 0
	for _, it := range s.items {
		if it.hasPrev && it.State != Deleted {
			n++
		}
	}
	return n
}

func (s *Store[K, V]) filter(st State) []*Item[K, V] {
	var out []*Item[K, V]
	for _, it := range s.changed {
		if it.State == st {
			out = append(out, it)
		}
	}
	return out
}
