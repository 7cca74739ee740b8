//go:build e2e

package faults

import (
	"errors"
	"testing"
	"time"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// A timed-out probe is sent again only when the test process stood still
// for stallExcuse or more within the probe's time; a refusal never is.
func TestResendAfterStall(t *testing.T) {
	r := &probeRun{ticked: make(chan struct{}), done: make(chan struct{})}
	t0 := time.Now().Add(-10 * time.Second)
	r.stalls = []stallSpan{
		{from: t0.Add(2 * time.Second), to: t0.Add(2*time.Second + 300*time.Millisecond)},
		{from: t0.Add(5 * time.Second), to: t0.Add(5*time.Second + 50*time.Millisecond)},
	}
	if got := r.stalledDuring(t0.Add(2100*time.Millisecond), t0.Add(3*time.Second)); got != 200*time.Millisecond {
		t.Errorf("stalledDuring, overlapping the first stall's end: %v, want 200ms", got)
	}
	if got := r.stalledDuring(t0, t0.Add(10*time.Second)); got != 350*time.Millisecond {
		t.Errorf("stalledDuring over both: %v, want 350ms", got)
	}
	close(r.ticked) // the stall watch has run since
	timedOut := netlab.Result{Outcome: netlab.TimedOut, Err: errors.New("i/o timeout")}
	cases := []struct {
		name string
		sent time.Time
		res  netlab.Result
		want bool
	}{
		{"timed out across a 300 ms stall", t0.Add(1500 * time.Millisecond), timedOut, true},
		{"timed out with only a 50 ms stall", t0.Add(4500 * time.Millisecond), timedOut, false},
		{"timed out without a stall", t0.Add(7 * time.Second), timedOut, false},
		{"refused across a stall", t0.Add(1500 * time.Millisecond), netlab.Result{Outcome: netlab.Refused}, false},
	}
	for _, c := range cases {
		// The probe ended 1 s after it was sent.
		if got := r.resendAfterStallUntil(c.sent, c.sent.Add(time.Second), c.res); got != c.want {
			t.Errorf("%s: resend %v, want %v", c.name, got, c.want)
		}
	}

	// The traffic stopped before the stall watch ran again: the stalls
	// it recorded up to its end still excuse a timeout (the probe is then
	// not counted, see stopped).
	r = &probeRun{ticked: make(chan struct{}), watched: make(chan struct{}), done: make(chan struct{})}
	r.stalls = []stallSpan{{from: t0.Add(2 * time.Second), to: t0.Add(2*time.Second + 300*time.Millisecond)}}
	close(r.done)
	close(r.watched)
	if !r.resendAfterStallUntil(t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond), timedOut) {
		t.Error("a timeout across a stall, the traffic stopped since: not excused")
	}
	if r.resendAfterStallUntil(t0.Add(7*time.Second), t0.Add(8*time.Second), timedOut) {
		t.Error("a timeout without a stall, the traffic stopped since: excused")
	}
	if !r.stopped() {
		t.Error("stopped: false after done was closed")
	}
}

// The repair's time is read from kpng's log: the first sync after the
// damage that checked the rules.
func TestSyncLoggedAfter(t *testing.T) {
	after := time.Date(2026, 11, 26, 15, 34, 54, 0, time.Local)
	log := `I1126 15:34:53.900000    1 run.go:266] "Dataplane synced" revision=5 changes="reset=false resync=true node=false set=0 deleted=0" took="3ms"
I1126 15:34:54.100000    1 run.go:266] "Dataplane synced" revision=6 changes="reset=false resync=false node=false set=1 deleted=0" took="1ms"
I1126 15:34:54.250000    1 run.go:266] "Dataplane synced" revision=6 changes="reset=false resync=true node=false set=0 deleted=0" took="2ms"
`
	at, ok := syncLoggedAfter(log, after, "resync=true")
	if want := after.Add(250 * time.Millisecond); !ok || !at.Equal(want) {
		t.Errorf("syncLoggedAfter = %v, %v; want %v", at, ok, want)
	}
	if _, ok := syncLoggedAfter(log, after.Add(time.Second), "resync=true"); ok {
		t.Error("a sync before the damage was taken for the repair")
	}
}
