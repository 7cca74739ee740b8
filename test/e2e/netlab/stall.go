package netlab

import (
	"slices"
	"sync"
	"time"
)

// The tests' probes time out after about a second. On a machine loaded
// beyond its cores, the test process itself (which sends the probes and
// runs the endpoints' servers) may not run for that long: a probe then
// times out although the dataplane forwarded it, and the timeout measures
// the machine. A StallWatch tells such probes apart.

// StallTick is the period of a StallWatch.
const StallTick = 10 * time.Millisecond

// MaxResends bounds how often Probe sends one probe again.
const MaxResends = 3

// StallWatch records when the test process stood still: a goroutine due
// every StallTick notes each time it ran late, by a tick or more.
type StallWatch struct {
	mu        sync.Mutex
	spans     []stallSpan // the last minute's stalls
	longest   time.Duration
	longestAt time.Time
	ticked    chan struct{} // closed, and replaced, at each run
	done      chan struct{}
	watched   chan struct{} // closed once the watch ended, its stalls recorded
	wg        sync.WaitGroup
}

type stallSpan struct{ from, to time.Time }

// WatchStalls starts a StallWatch; Stop ends it.
func WatchStalls() *StallWatch {
	w := &StallWatch{ticked: make(chan struct{}), done: make(chan struct{}), watched: make(chan struct{})}
	w.wg.Add(1)
	go w.run()
	return w
}

func (w *StallWatch) run() {
	defer w.wg.Done()
	defer close(w.watched)
	tick := time.NewTicker(StallTick)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-w.done:
			// The time since the last run, too: a stall that stopped the
			// whole process may end with the watch stopped.
			now := time.Now()
			w.mu.Lock()
			if now.Sub(last)-StallTick >= StallTick {
				w.spans = append(w.spans, stallSpan{from: last, to: now})
			}
			w.mu.Unlock()
			return
		case <-tick.C:
		}
		now := time.Now() // the tick's own time is when it was due
		w.mu.Lock()
		if d := now.Sub(last) - StallTick; d >= StallTick {
			if d > w.longest {
				w.longest, w.longestAt = d, now
			}
			// A probe lasts seconds: older stalls no longer matter.
			w.spans = slices.DeleteFunc(w.spans, func(s stallSpan) bool { return now.Sub(s.to) > time.Minute })
			w.spans = append(w.spans, stallSpan{from: last, to: now})
		}
		close(w.ticked)
		w.ticked = make(chan struct{})
		w.mu.Unlock()
		last = now
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

// StalledDuring sums the stalls recorded within [from, to].
func (w *StallWatch) StalledDuring(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.spans {
		lo, hi := s.from, s.to
		if from.After(lo) {
			lo = from
		}
		if to.Before(hi) {
			hi = to
		}
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

// Excused reports whether a probe sent at sent, which ended at end with
// res, is to be sent again rather than counted: it timed out (a refusal or
// a wrong answer always counts) and, within its time, the test process
// stood still for a tenth of timeout or more in all, time the probe did
// not get to use. It first waits for the watch to run once more, so that
// a stall that just ended is on record.
func (w *StallWatch) Excused(sent, end time.Time, res Result, timeout time.Duration) bool {
	return res.Outcome == TimedOut && w.StoodStill(sent, end, timeout/10)
}

// StoodStill reports whether the test process stood still for atLeast or
// more in all within [from, to]. It first waits for the watch to run once
// more, so that a stall that just ended is on record (or, the watch
// stopped meanwhile, for it to record the stalls up to its end).
func (w *StallWatch) StoodStill(from, to time.Time, atLeast time.Duration) bool {
	w.mu.Lock()
	ticked := w.ticked
	w.mu.Unlock()
	select {
	case <-ticked:
	case <-w.done:
		<-w.watched
	}
	return w.StalledDuring(from, to) >= atLeast
}

// Stopped reports whether Stop was called.
func (w *StallWatch) Stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Probe runs dial, and runs it again (at most MaxResends times) while its
// result is Excused: a dataplane that drops the probe drops it again, and
// the last result counts. It returns that result and how many times the
// probe was sent again, for the test to report beside its counts.
func (w *StallWatch) Probe(dial func() Result, timeout time.Duration) (Result, int) {
	sent := time.Now()
	res := dial()
	resent := 0
	for resent < MaxResends && w.Excused(sent, time.Now(), res, timeout) {
		resent++
		sent = time.Now()
		res = dial()
	}
	return res, resent
}
