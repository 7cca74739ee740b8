package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseOneChangeSyncsTakesOnlySyncsOfOneChangedService(t *testing.T) {
	log := `I1126 19:00:30.1 1 run.go:273] "Dataplane synced" revision=1 services=101 took="230.60713ms"
I1126 19:00:32.1 1 run.go:277] "Dataplane synced" revision=2 changes="reset=false resync=false node=false set=1 deleted=0" took="412.6µs"
I1126 19:00:32.3 1 run.go:277] "Dataplane synced" revision=3 changes="reset=false resync=true node=false set=0 deleted=0" took="3.2ms"
I1126 19:00:32.5 1 run.go:277] "Dataplane synced" revision=5 changes="reset=false resync=false node=false set=2 deleted=0" took="1.1ms"
I1126 19:00:32.7 1 run.go:277] "Dataplane synced" revision=6 changes="reset=false resync=true node=false set=1 deleted=0" took="9ms"
I1126 19:00:32.9 1 run.go:277] "Dataplane synced" revision=7 changes="reset=false resync=false node=false set=1 deleted=0" took="1.5ms"
I1126 19:00:33.0 1 other.go:1] "Something else" took="7s"
`
	got, err := parseOneChangeSyncs(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{412600 * time.Nanosecond, 1500 * time.Microsecond}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestSummarizeOneChanges(t *testing.T) {
	var took []time.Duration
	for i := 100; i >= 1; i-- {
		took = append(took, time.Duration(i)*100*time.Microsecond)
	}
	r := summarizeOneChanges(120, took)
	if r.Changes != 120 || r.Syncs != 100 || r.P50Ms != 5 || r.P99Ms != 9.9 || r.MaxMs != 10 || r.MeanMs != 5.05 {
		t.Errorf("got %+v", r)
	}
	if r := summarizeOneChanges(3, nil); r.Syncs != 0 || r.P50Ms != 0 {
		t.Errorf("no syncs: got %+v", r)
	}
}

func TestProgramRunsSince(t *testing.T) {
	before := map[string]ProgramRun{"connect4": {Runs: 10, RuntimeNs: 7000}, "tcx_in_eth0+tcx_in_pod0": {Runs: 5, RuntimeNs: 100}}
	after := map[string]ProgramRun{"connect4": {Runs: 110, RuntimeNs: 77000}, "tcx_in_eth0+tcx_in_pod0": {Runs: 1, RuntimeNs: 10},
		"getpeername4": {Runs: 4, RuntimeNs: 40}}
	got := programRunsSince(before, after)
	if got["connect4"] != (ProgramRun{Runs: 100, RuntimeNs: 70000}) || got["connect4"].NsPerRun() != 700 {
		t.Errorf("connect4: %+v", got["connect4"])
	}
	if _, ok := got["tcx_in_eth0+tcx_in_pod0"]; ok {
		t.Error("a program replaced behind its link (its counters went back) has a figure")
	}
	if got["getpeername4"].Runs != 4 {
		t.Errorf("a link seen only after: %+v", got["getpeername4"])
	}
}

// Single changes reach a proxy one by one: at the bench's rate for a 10 ms
// minimum sync period, spaced wider than a longer one (kpng-iptables' 1 s,
// which coalesced five changes per sync at 5/s), and then fewer of them.
func TestSinglePacing(t *testing.T) {
	if k, rate := singlePacing(60, 5, 10*time.Millisecond); k != 60 || rate != 5 {
		t.Errorf("10 ms: %d changes at %g/s, want 60 at 5/s", k, rate)
	}
	k, rate := singlePacing(60, 5, time.Second)
	if gap := time.Duration(float64(time.Second) / rate); gap < 1250*time.Millisecond-time.Microsecond || k != 24 {
		t.Errorf("1 s: %d changes every %v, want 24 every 1.25 s", k, gap)
	}
	if k, _ := singlePacing(60, 5, 10*time.Second); k != 10 {
		t.Errorf("10 s: %d changes, want at least 10", k)
	}
	if k, _ := singlePacing(5, 5, time.Second); k != 5 {
		t.Errorf("asked for 5: %d", k)
	}
}

func TestKpngKindMinSync(t *testing.T) {
	for name, want := range map[string]time.Duration{"kpng-nft": 100 * time.Millisecond, "kpng-nft-1s": time.Second,
		"kpng-iptables": time.Second, "kpng-ebpf": 10 * time.Millisecond} {
		var got time.Duration = -1
		for _, k := range proxyKinds {
			if k.Name == name {
				got = k.minSync
			}
		}
		if got != want {
			t.Errorf("%s: minimum sync period %v, want %v", name, got, want)
		}
	}
}

// A single change waits for the line of its own sync: not a line written
// before the change (before offset), not a sync of no change, not half a
// line.
func TestNextLineWaitsForTheSyncOfAChange(t *testing.T) {
	// A proxy past its first sync, its log fed as the process writes it.
	p := &proxy{firstSync: time.Now()}
	log := &lineWatcher{fn: p.onLine}
	write := func(s string) {
		if _, err := log.Write([]byte(s)); err != nil {
			t.Error(err)
		}
	}
	write(`"Dataplane synced" revision=2 changes="reset=false resync=false node=false set=1 deleted=0" took="1ms"` + "\n")
	synced := p.nextLine(changeSynced)
	// What the proxy writes next, a part at a time: the wait must end on
	// none but the last.
	parts := []string{
		`"Dataplane synced" revision=3 changes="reset=false resync=true node=false set=0 deleted=0" took="3ms"` + "\n",
		`"Dataplane synced" revision=4 changes="reset=false resync=false node=false set=1`,
		` deleted=0" took="2ms"` + "\n",
	}
	for i, part := range parts {
		select {
		case <-synced:
			t.Fatalf("ended before %q was written", part)
		default:
		}
		write(part)
		if i < len(parts)-1 {
			continue
		}
		select {
		case <-synced:
		default:
			t.Fatal("not ended by the sync of a change")
		}
	}
	// A wait for a line that does not come stays open, and is kept.
	never := p.nextLine(regexp.MustCompile(`set=7`))
	write(parts[0])
	select {
	case <-never:
		t.Error("a wait for set=7 ended on another line")
	default:
	}
	if len(p.waiters) != 1 {
		t.Errorf("%d waits kept, want the one not served", len(p.waiters))
	}
}
