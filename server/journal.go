package server

import (
	"context"
	"slices"
	"sort"
	"sync"
)

// journal is keyed state with a revision and a bounded history of what
// changed at each revision, holding the value each key had before. From it a
// stream computes the change between any recent revision and now, without
// keeping anything per client: a client is just a revision.
//
// Values are pointers to immutable messages: a change stores a new pointer,
// and readers may keep the pointers they read after releasing the lock.
type journal[K comparable, V comparable] struct {
	mu    sync.RWMutex
	cur   map[K]V
	rev   uint64
	floor uint64         // the history holds every change made after floor
	hist  []change[K, V] // hist[start:] is the history, ordered by rev, oldest first
	start int
	max   int // bound of the history
	// compare orders the items returned by since.
	compare func(a, b K) int
	// full caches the whole state at one revision, shared by the streams
	// that need a reset at that revision (all of them, when a server starts).
	full    []item[K, V]
	fullRev uint64
	changed chan struct{} // closed and replaced at every revision
}

type change[K comparable, V comparable] struct {
	rev uint64
	key K
	old V // zero: the key did not exist
}

// item is one key's change between a client's revision and now: its value
// then and now (zero: absent).
type item[K comparable, V comparable] struct {
	key      K
	old, cur V
}

func newJournal[K comparable, V comparable](maxHistory int, compare func(a, b K) int) *journal[K, V] {
	return &journal[K, V]{cur: map[K]V{}, max: maxHistory, compare: compare, changed: make(chan struct{})}
}

// update applies one revision's writes (set a value; the zero value deletes)
// and moves the revision if anything changed, or if force is set (the first
// view of an empty node is still a view to publish).
func (j *journal[K, V]) update(force bool, fn func(set func(K, V))) {
	var zero V
	j.mu.Lock()
	defer j.mu.Unlock()
	next := j.rev + 1
	n := 0
	fn(func(k K, v V) {
		old, ok := j.cur[k]
		if old == v || (!ok && v == zero) {
			return
		}
		if v == zero {
			delete(j.cur, k)
		} else {
			j.cur[k] = v
		}
		j.hist = append(j.hist, change[K, V]{rev: next, key: k, old: old})
		n++
	})
	if n == 0 && !force {
		return
	}
	j.rev = next
	j.full = nil
	if over := len(j.hist) - j.start - j.max; over > 0 {
		j.floor = j.hist[j.start+over-1].rev
		clear(j.hist[j.start : j.start+over]) // release the old values
		j.start += over
		// Drop the dead prefix once it is as long as the history: a
		// revision costs amortized O(its changes), not O(the history),
		// and the array holds at most twice the bound.
		if j.start >= j.max {
			j.hist = append(j.hist[:0:0], j.hist[j.start:]...)
			j.start = 0
		}
	}
	close(j.changed)
	j.changed = make(chan struct{})
}

// get returns the current value of a key (zero when absent). Only the
// writer's goroutine may call it without holding the lock.
func (j *journal[K, V]) get(k K) V { return j.cur[k] }

// keys calls fn for every current key (writer's goroutine only).
func (j *journal[K, V]) keys(fn func(K)) {
	for k := range j.cur {
		fn(k)
	}
}

// wait blocks until the revision is past rev and returns it. A rev the
// journal never reached (a client's resume with a revision from nowhere)
// does not wait: since answers it with a reset.
func (j *journal[K, V]) wait(ctx context.Context, rev uint64) (uint64, error) {
	for {
		j.mu.RLock()
		cur, ch := j.rev, j.changed
		j.mu.RUnlock()
		if cur != rev {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ch:
		}
	}
}

// since returns what changed after revision from, sorted by key, and the
// current revision.
// reset is true when the history does not reach back to from (or from is
// 0): the items are then the whole state, to replace what the client holds.
// Items of a reset are shared between callers: read-only.
func (j *journal[K, V]) since(from uint64) (items []item[K, V], rev uint64, reset bool) {
	j.mu.RLock()
	if from == 0 || from < j.floor || from > j.rev {
		if j.fullRev == j.rev && j.full != nil {
			items, rev = j.full, j.rev
			j.mu.RUnlock()
			return items, rev, true
		}
		j.mu.RUnlock()
		return j.snapshot()
	}
	defer j.mu.RUnlock()
	hist := j.hist[j.start:]
	first := sort.Search(len(hist), func(i int) bool { return hist[i].rev > from })
	seen := make(map[K]bool, len(hist)-first)
	for _, c := range hist[first:] {
		if seen[c.key] {
			continue // the first change after from holds the client's value
		}
		seen[c.key] = true
		if cur := j.cur[c.key]; cur != c.old { // changed and back: nothing to send
			items = append(items, item[K, V]{key: c.key, old: c.old, cur: cur})
		}
	}
	slices.SortFunc(items, j.compareItems)
	return items, j.rev, false
}

func (j *journal[K, V]) compareItems(a, b item[K, V]) int { return j.compare(a.key, b.key) }

func (j *journal[K, V]) snapshot() ([]item[K, V], uint64, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fullRev != j.rev || j.full == nil {
		full := make([]item[K, V], 0, len(j.cur))
		for k, v := range j.cur {
			full = append(full, item[K, V]{key: k, cur: v})
		}
		slices.SortFunc(full, j.compareItems)
		j.full, j.fullRev = full, j.rev
	}
	return j.full, j.rev, true
}

// revision returns the current revision.
func (j *journal[K, V]) revision() uint64 {
	j.mu.RLock()
	defer j.mu.RUnlock()
	return j.rev
}
