package netlab

import (
	"errors"
	"testing"
	"time"
)

// A timed-out probe is excused only when the test process stood still for
// a tenth of its timeout or more within its time; a refusal never is.
func TestStallWatchExcuses(t *testing.T) {
	w := &StallWatch{ticked: make(chan struct{}), done: make(chan struct{}), watched: make(chan struct{})}
	t0 := time.Now().Add(-10 * time.Second)
	w.spans = []stallSpan{
		{from: t0.Add(2 * time.Second), to: t0.Add(2*time.Second + 300*time.Millisecond)},
		{from: t0.Add(5 * time.Second), to: t0.Add(5*time.Second + 50*time.Millisecond)},
	}
	if got := w.StalledDuring(t0.Add(2100*time.Millisecond), t0.Add(3*time.Second)); got != 200*time.Millisecond {
		t.Errorf("StalledDuring, overlapping the first stall's end: %v, want 200ms", got)
	}
	if got := w.StalledDuring(t0, t0.Add(10*time.Second)); got != 350*time.Millisecond {
		t.Errorf("StalledDuring over both: %v, want 350ms", got)
	}
	close(w.ticked) // the watch has run since
	timedOut := Result{Outcome: TimedOut, Err: errors.New("i/o timeout")}
	cases := []struct {
		name string
		sent time.Time
		res  Result
		want bool
	}{
		{"timed out across a 300 ms stall", t0.Add(1500 * time.Millisecond), timedOut, true},
		{"timed out with only a 50 ms stall", t0.Add(4500 * time.Millisecond), timedOut, false},
		{"timed out without a stall", t0.Add(7 * time.Second), timedOut, false},
		{"refused across a stall", t0.Add(1500 * time.Millisecond), Result{Outcome: Refused}, false},
	}
	for _, c := range cases {
		if got := w.Excused(c.sent, c.sent.Add(time.Second), c.res, time.Second); got != c.want {
			t.Errorf("%s: excused %v, want %v", c.name, got, c.want)
		}
	}

	// The watch stopped before it ran again: the stalls it recorded up to
	// its end still excuse a timeout.
	w = &StallWatch{ticked: make(chan struct{}), done: make(chan struct{}), watched: make(chan struct{})}
	w.spans = []stallSpan{{from: t0.Add(2 * time.Second), to: t0.Add(2*time.Second + 300*time.Millisecond)}}
	close(w.done)
	close(w.watched)
	if !w.Excused(t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond), timedOut, time.Second) {
		t.Error("a timeout across a stall, the watch stopped since: not excused")
	}
	if w.Excused(t0.Add(7*time.Second), t0.Add(8*time.Second), timedOut, time.Second) {
		t.Error("a timeout without a stall, the watch stopped since: excused")
	}
	if !w.Stopped() {
		t.Error("Stopped: false after Stop")
	}
}

// Probe sends a probe again only while it is excused, and at most
// MaxResends times: the last result counts.
func TestStallWatchProbe(t *testing.T) {
	w := WatchStalls()
	defer w.Stop()
	calls := 0
	res, resent := w.Probe(func() Result { calls++; return Result{Outcome: TimedOut} }, time.Second)
	if res.Outcome != TimedOut || resent != 0 || calls != 1 {
		t.Errorf("a timeout without a stall: %v, resent %d, %d calls; want it counted at once", res.Outcome, resent, calls)
	}
	// A stall covering the probe's time: it is sent again.
	now := time.Now()
	w.mu.Lock()
	w.spans = append(w.spans, stallSpan{from: now.Add(-time.Second), to: now.Add(time.Hour)})
	w.mu.Unlock()
	calls = 0
	res, resent = w.Probe(func() Result {
		calls++
		time.Sleep(150 * time.Millisecond) // the probe's own time, within the stall
		return Result{Outcome: TimedOut}
	}, time.Second)
	if resent != MaxResends || calls != MaxResends+1 || res.Outcome != TimedOut {
		t.Errorf("a timeout within a stall: %v, resent %d, %d calls; want %d resends, the last counted", res.Outcome, resent, calls, MaxResends)
	}
}
