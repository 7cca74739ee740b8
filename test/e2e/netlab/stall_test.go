package netlab

import (
	"testing"
	"time"
)

// A run of the watch late by a tick or more is a stall, and the longest is
// kept with its end; a run on time is none.
func TestStallWatchRecordsTheLongest(t *testing.T) {
	w := &StallWatch{done: make(chan struct{})}
	t0 := time.Now()
	w.record(t0, t0.Add(StallTick+StallTick/2)) // late by half a tick: on time
	if d, _ := w.Longest(); d != 0 {
		t.Errorf("a run half a tick late recorded as a stall of %v", d)
	}
	w.record(t0, t0.Add(310*time.Millisecond))
	w.record(t0.Add(time.Second), t0.Add(1100*time.Millisecond))
	d, at := w.Longest()
	if d != 300*time.Millisecond || !at.Equal(t0.Add(310*time.Millisecond)) {
		t.Errorf("longest: %v until %v; want 300ms until %v", d, at, t0.Add(310*time.Millisecond))
	}
	// The real watch starts and stops, more than once.
	rw := WatchStalls()
	rw.Stop()
	rw.Stop()
}

// A patience ends once the process ran for its wait, and says so; one
// stopped before that is not spent.
func TestPatience(t *testing.T) {
	start := time.Now()
	p := startPatience(100 * time.Millisecond)
	<-p.ctx.Done()
	if !p.spent() {
		t.Errorf("ended after %v but not spent", time.Since(start))
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("a 100ms patience ended after %v", d)
	}
	p.stop()
	q := startPatience(time.Hour)
	q.stop()
	if q.spent() {
		t.Error("a patience stopped at once is spent")
	}
}
