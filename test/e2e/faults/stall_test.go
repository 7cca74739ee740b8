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
}
