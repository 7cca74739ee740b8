package netlab

import (
	"sync"
	"time"
)

// On a machine loaded beyond its cores, the test process itself (which
// sends the probes and runs the endpoints' servers) may not run for
// seconds. Probes do not depend on it (Host.Probe judges by the kernel's
// record), but a test that failed is easier to read with the stalls of its
// process beside it: a StallWatch records them.

// StallTick is the period of a StallWatch.
const StallTick = 10 * time.Millisecond

// StallWatch records when the test process stood still: a goroutine due
// every StallTick notes each time it ran late, by a tick or more.
type StallWatch struct {
	mu        sync.Mutex
	longest   time.Duration
	longestAt time.Time
	done      chan struct{}
	wg        sync.WaitGroup
}

// WatchStalls starts a StallWatch; Stop ends it.
func WatchStalls() *StallWatch {
	w := &StallWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go w.run()
	return w
}

func (w *StallWatch) run() {
	defer w.wg.Done()
	tick := time.NewTicker(StallTick)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-w.done:
			// The time since the last run, too: a stall that stopped the
			// whole process may end with the watch stopped.
			w.record(last, time.Now())
			return
		case <-tick.C:
		}
		now := time.Now() // the tick's own time is when it was due
		w.record(last, now)
		last = now
	}
}

// record notes a run of the watch at now, the one before at last: late by
// a tick or more, it is a stall.
func (w *StallWatch) record(last, now time.Time) {
	d := now.Sub(last) - StallTick
	if d < StallTick {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d > w.longest {
		w.longest, w.longestAt = d, now
	}
}

// Stop ends the watch; it may be called more than once.
func (w *StallWatch) Stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
}

// Longest is the longest stall seen, and when it ended.
func (w *StallWatch) Longest() (time.Duration, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest, w.longestAt
}
