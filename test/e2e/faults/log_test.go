//go:build e2e

package faults

import (
	"testing"
	"time"
)

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
	// A sync that ended after the damage but started before it (took
	// 400 ms) did not repair it; the next one did.
	running := `I1126 15:34:54.100000    1 run.go:266] "Dataplane synced" revision=6 changes="reset=false resync=true node=false set=0 deleted=0" took="400ms"
I1126 15:34:54.300000    1 run.go:266] "Dataplane synced" revision=6 changes="reset=false resync=true node=false set=0 deleted=0" took="2.5ms"
`
	at, ok = syncStartedAfter(running, after, "resync=true")
	if want := after.Add(300 * time.Millisecond); !ok || !at.Equal(want) {
		t.Errorf("syncStartedAfter = %v, %v; want %v", at, ok, want)
	}
	if at, ok := syncLoggedAfter(running, after, "resync=true"); !ok || !at.Equal(after.Add(100*time.Millisecond)) {
		t.Errorf("syncLoggedAfter = %v, %v; want the first line's end", at, ok)
	}
}

// The first sync started after the refusal was lifted, failed or not, is
// read from the driver's log by its start (its end less its took).
func TestFirstSyncAttempt(t *testing.T) {
	lifted := time.Date(2026, 11, 26, 15, 34, 54, 0, time.Local)
	log := `E1126 15:34:54.300000    1 run.go:266] "Sync failed, will retry" err="refused" revision=5 changes="reset=true resync=false node=false set=0 deleted=0" took="500ms" retryIn="1s"
E1126 15:34:55.400000    1 run.go:266] "Sync failed, will retry" err="refused" revision=5 changes="reset=true resync=false node=false set=0 deleted=0" took="300ms" retryIn="1s"
I1126 15:34:56.600000    1 run.go:275] "Dataplane synced again" revision=6 failures=2 took="200ms"
`
	got, ok := firstSyncAttempt(log, lifted)
	if !ok || !got.failed || !got.start.Equal(lifted.Add(1100*time.Millisecond)) {
		t.Errorf("firstSyncAttempt = %+v, %v; want the failure started at +1.1s (the one before started before the lifting)", got, ok)
	}
	got, ok = firstSyncAttempt(log, lifted.Add(1200*time.Millisecond))
	if !ok || got.failed || !got.start.Equal(lifted.Add(2400*time.Millisecond)) {
		t.Errorf("firstSyncAttempt after +1.2s = %+v, %v; want the success started at +2.4s", got, ok)
	}
	if _, ok := firstSyncAttempt(log, lifted.Add(3*time.Second)); ok {
		t.Error("a sync found after the last one started")
	}
}
