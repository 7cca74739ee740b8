package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchFanoutJSON is what `bench-fanout --services 100 --agents 20
// --full-agents 2 --changes 5 --json F` wrote.
const benchFanoutJSON = `{
  "api": "globalv1",
  "agents": 20,
  "full_agents": 2,
  "endpoints_per_service": 3,
  "changes": 5,
  "sizes": [
    {
      "services": 100,
      "change_to_all_agents_ms": [1.011328, 1.159799, 1.396512, 1.588959, 1.950798],
      "one_agent_p50_ms": 0.964147,
      "one_agent_p99_ms": 1.850238,
      "full_agents_p50_ms": 1.011328,
      "full_agents_p99_ms": 1.185798,
      "brain_cpu_per_change_ms": 2,
      "brain_bytes_sent_per_change": 4314,
      "brain_bytes_read_per_change": 1475,
      "initial_seconds": 0.101251061,
      "initial_brain_cpu_seconds": 0.01,
      "initial_bytes_per_agent": 19037,
      "brain_rss_idle_bytes": 15613952,
      "brain_rss_synced_bytes": 20660224,
      "brain_peak_rss_synced_bytes": 20660224,
      "brain_rss_after_changes_bytes": 20992000,
      "agents_rss_bytes": 24977408
    }
  ]
}
`

func TestParseFanout(t *testing.T) {
	f, err := parseFanout([]byte(benchFanoutJSON))
	if err != nil {
		t.Fatal(err)
	}
	if f.API != "globalv1" || f.Agents != 20 || f.FullAgents != 2 || f.Changes != 5 || f.Services != 100 ||
		f.EndpointsPerService != 3 || f.BrainBytesSentPerChange != 4314 || f.AgentsRSSBytes != 24977408 {
		t.Errorf("parsed %+v", f)
	}
	// (20,660,224 - 15,613,952) / 20 agents.
	if got, want := f.brainBytesPerAgent(), 252313.6; math.Abs(got-want) > 1e-6 {
		t.Errorf("brain bytes per agent %v, want %v", got, want)
	}
	// Nearest rank over 5 changes: p50 the 3rd, p99 and max the 5th.
	for _, c := range []struct{ q, want float64 }{{0.5, 1.396512}, {0.99, 1.950798}, {1, 1.950798}} {
		if got := f.allAgents(c.q); got != c.want {
			t.Errorf("all agents q%v = %v, want %v", c.q, got, c.want)
		}
	}

	for name, edit := range map[string]func(m map[string]any){
		"two sizes": func(m map[string]any) { m["sizes"] = append(m["sizes"].([]any), m["sizes"].([]any)[0]) },
		"no size":   func(m map[string]any) { m["sizes"] = []any{} },
		"no agents": func(m map[string]any) { m["agents"] = 0 },
		"a change without its time": func(m map[string]any) {
			m["changes"] = 6
		},
		"no idle RSS": func(m map[string]any) {
			m["sizes"].([]any)[0].(map[string]any)["brain_rss_idle_bytes"] = 0
		},
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(benchFanoutJSON), &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		if f, err := parseFanout(b); err == nil {
			t.Errorf("%s: parsed without error: %+v", name, f)
		}
	}
	if _, err := parseFanout([]byte("fan-out over globalv1: ...")); err == nil {
		t.Error("the printed table parsed as JSON")
	}
}

// fanoutFigures are made-up figures: 100 changes, 98 of them at 1 % to
// 98 % of p99 (so the p50 is half of it), then p99 and the max as given.
func fanoutFigures(agents, services int, p99, max float64) *FanoutFigures {
	f := &FanoutFigures{
		FanoutSettings: FanoutSettings{API: "globalv1", Agents: agents, FullAgents: 10, EndpointsPerService: 3, Changes: 100},
		FanoutSize: FanoutSize{Services: services, OneAgentP50Ms: 20, OneAgentP99Ms: 60, FullAgentsP50Ms: 21, FullAgentsP99Ms: 65,
			BrainCPUPerChangeMs: 37.6, BrainBytesSentPerChange: 228310, BrainBytesReadPerChange: 74000,
			InitialSeconds: 28.5, InitialBrainCPUSeconds: 15, InitialBytesPerAgent: 1966 << 10,
			BrainRSSIdleBytes: 38 << 20, BrainRSSSyncedBytes: 468 << 20, BrainPeakRSSSyncedBytes: 470 << 20,
			BrainRSSAfterChangesBytes: 469 << 20, AgentsRSSBytes: 1881 << 20},
	}
	for i := range 98 {
		f.ChangeToAllAgentsMs = append(f.ChangeToAllAgentsMs, float64(98-i)*p99/100) // not in order
	}
	f.ChangeToAllAgentsMs = append(f.ChangeToAllAgentsMs, max, p99)
	return f
}

func fanoutResult(f *FanoutFigures) *FanoutResult {
	return &FanoutResult{Run: "20261126T200000Z-1", Started: time.Date(2026, 11, 26, 20, 30, 0, 0, time.UTC),
		Finished: time.Date(2026, 11, 26, 20, 32, 0, 0, time.UTC), Command: "hack/bench.sh",
		Args:       []string{"--services", fmt.Sprint(f.Services), "--agents", fmt.Sprint(f.Agents), "--changes", "100"},
		KpngCommit: "0123456789ab", Machine: Machine{CPUModel: "AMD EPYC", Cores: 2, Kernel: "6.18", LoadStart: [3]float64{4, 0, 0},
			LoadEnd: [3]float64{6, 0, 0}}, LoadDuring: []float64{4, 7.5}, Figures: f}
}

// The p99 of a change's time to all agents is checked against 1 s
// (strictly under), and the brain's memory per agent is stated; a run
// smaller than the goal's size says so.
func TestFanoutRows(t *testing.T) {
	for _, c := range []struct {
		name            string
		agents, svcs    int
		p99             float64
		met, figure     string
		short, notShort bool
	}{
		{name: "met", agents: 1000, svcs: 10000, p99: 78.2, met: "yes", figure: "78.2"},
		{name: "one second is not under one second", agents: 1000, svcs: 10000, p99: 1000, met: "**no**", figure: "1000.0", short: true},
		{name: "missed", agents: 1000, svcs: 10000, p99: 2622, met: "**no**", figure: "2622.0", short: true},
		{name: "smaller run", agents: 50, svcs: 100, p99: 12, met: "yes (smaller than the goal's size)", figure: "12.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The max is far above the p99: a p99 taken as the max
			// would fail every case.
			rows := fanoutRows(fanoutResult(fanoutFigures(c.agents, c.svcs, c.p99, 5000)))
			if len(rows) != 2 {
				t.Fatalf("%d rows, want 2", len(rows))
			}
			if rows[0].met != c.met || rows[0].figure != c.figure || rows[0].goal != "< 1000" {
				t.Errorf("p99 row %+v, want figure %s, met %s", rows[0], c.figure, c.met)
			}
			if (rows[0].short != "") != c.short {
				t.Errorf("shortfall %q", rows[0].short)
			}
			// (468 - 38) MiB over the agents, in KiB.
			if want := f0(430 * 1024 / float64(c.agents)); rows[1].figure != want || rows[1].goal != "stated" {
				t.Errorf("memory row %+v, want %s KiB", rows[1], want)
			}
		})
	}

	failed := &FanoutResult{Error: "bench-fanout: exit status 1 (log: x)"}
	rows := fanoutRows(failed)
	if len(rows) != 1 || rows[0].met != "no data" || !strings.Contains(rows[0].short, "exit status 1") {
		t.Errorf("a failed fan-out: %+v", rows)
	}
	if rows := fanoutRows(nil); rows != nil {
		t.Errorf("no fan-out: %+v", rows)
	}
}

func TestFanoutSection(t *testing.T) {
	var b strings.Builder
	fanoutSection(&b, fanoutResult(fanoutFigures(1000, 10000, 78.2, 95.7)))
	wantAll(t, "the section lacks", b.String(), []string{
		"### Fan-out: one kpng brain to many agents",
		"Command: `go run ./hack/bench-fanout --services 10000 --agents 1000 --changes 100` (from `hack/bench.sh`)",
		"1-minute load during the run: 4.0 to 7.5",
		"| 10,000 Services, 1,000 agents | |",
		"| **a change to all agents: p50 / p99 / max (ms)** | 39.1 / **78.2** / 95.7 |",
		"| bytes the brain sent per change: all agents (per agent) | 228,310 (228) |",
		"| initial full state to every agent: time (s), brain CPU (s), bytes per agent (KiB) | 28.5, 15.0, 1,966 |",
		"| brain RSS: store loaded, no agent / every agent synced (peak) / after the changes (MiB) | 38 / 468 (470) / 469 |",
		"| **brain memory per agent (KiB)** | 440 |",
		"10 of the agents are complete node agents",
		"the 990 others receive and decode every batch",
	})

	b.Reset()
	fanoutSection(&b, &FanoutResult{Command: "hack/bench.sh", Error: "bench-fanout: signal: killed (log: x)"})
	wantAll(t, "a failed fan-out's section lacks", b.String(), []string{"**The fan-out failed in this run**: bench-fanout: signal: killed (log: x)."})
}

func TestFanoutServices(t *testing.T) {
	for _, c := range []struct {
		sizes       []int
		given, want int
	}{
		{[]int{100, 1000, 5000, 10000}, 0, 10000},
		{[]int{100}, 0, 100},
		{[]int{100, 1000, 5000, 10000, 30000}, 0, 10000},
		{[]int{30000}, 0, 10000},
		{[]int{5000, 100}, 0, 5000},
		{[]int{100}, 2000, 2000},
	} {
		if got := fanoutServices(c.sizes, c.given); got != c.want {
			t.Errorf("fanoutServices(%v, %d) = %d, want %d", c.sizes, c.given, got, c.want)
		}
	}
}

// withRuns returns sampleResults' 10,000 and a 30,000 made from it, whose
// kpng cold starts are the given multiples of 10,000's, from one run.
func withRuns(nft, iptables float64) []*SizeResult {
	results := sampleResults()
	r10 := results[3]
	r30 := *r10
	r30.Services = size30k
	r30.Proxies = nil
	for _, p := range r10.Proxies {
		q := *p
		switch p.Name {
		case "kpng-nft":
			q.FirstSyncSeconds *= nft
		case "kpng-iptables":
			q.FirstSyncSeconds *= iptables
		}
		r30.Proxies = append(r30.Proxies, &q)
	}
	r10.Run, r30.Run = "run-1", "run-1"
	return append(results, &r30)
}

func TestLinearityRows(t *testing.T) {
	// sampleResults' kpng cold start at 10,000 is 11 s.
	rows := linearityRows(withRuns(3.3, 3.5))
	if len(rows) != 2 {
		t.Fatalf("%d rows, want one per kpng backend: %+v", len(rows), rows)
	}
	if r := rows[0]; r.proxy != "kpng-nft" || r.figure != "36.3" || r.refValue != "11.0" || r.ratio != "3.30" || r.met != "yes" || r.short != "" {
		t.Errorf("3.3 x is within the goal: %+v", r)
	}
	if r := rows[1]; r.proxy != "kpng-iptables" || r.met != "**no**" ||
		!strings.Contains(r.short, "38.5 s at 30,000 against 11.0 s at 10,000, a ratio of 3.50 where the goal is at most 3.3 (it would need 36.3 s or less)") {
		t.Errorf("3.5 x misses the goal: %+v", r)
	}

	// From two runs: shown, not checked.
	results := withRuns(2, 2)
	results[4].Run = "run-2"
	for _, r := range linearityRows(results) {
		if r.met != "not the same run" || r.ratio != "2.00" || !strings.Contains(r.short, "not known to come from one run") {
			t.Errorf("two runs: %+v", r)
		}
	}
	// Results without a run's identity are not known to be one run.
	results = withRuns(2, 2)
	results[3].Run, results[4].Run = "", ""
	if r := linearityRows(results)[0]; r.met != "not the same run" {
		t.Errorf("no run recorded: %+v", r)
	}

	// 30,000 did not sync within the start timeout, far above 3.3 x.
	results = withRuns(1, 1)
	p := results[4].proxy("kpng-nft")
	*p = ProxyResult{Name: p.Name, NoSyncWithin: "10m0s"}
	if r := linearityRows(results)[0]; r.met != "**no**" || r.figure != "did not sync within 10m0s" {
		t.Errorf("no sync at 30,000: %+v", r)
	}

	// 30,000 not run: the row says so, and the notes say why.
	results = sampleResults()
	results[3].Note30k = "30,000 services were not run: 10,000 took 30m0s, so 30,000 would take about 2h30m0s (5 x), more than --budget-30k 2h0m0s"
	if r := linearityRows(results)[0]; r.figure != "not run" || r.met != "–" || r.short != "" {
		t.Errorf("30,000 not run: %+v", r)
	}
	var b strings.Builder
	targetsSection(&b, results, fanoutResult(fanoutFigures(1000, 10000, 78.2, 95.7)))
	wantAll(t, "the targets lack", b.String(), []string{
		"| cold start, 30,000 / 10,000 services (s) | kpng-nft | not run | kpng-nft at 10,000 | 11.0 | – | ≤ 3.3 x | – |",
		"Not checked here: 30,000 services against 10,000: 30,000 services were not run: 10,000 took 30m0s, so 30,000 " +
			"would take about 2h30m0s (5 x), more than --budget-30k 2h0m0s.",
		"| one brain to many agents: a change to all agents, p99 (ms) | kpng brain, 1,000 agents, 10,000 Services | 78.2 |  |  |  | < 1000 | yes |",
		"| one brain to many agents: brain memory per agent (KiB) | kpng brain, 1,000 agents, 10,000 Services | 440 |  |  |  | stated | – |",
	})
	if strings.Contains(b.String(), "one brain to 1,000 agents: no fan-out") || strings.Contains(b.String(), "indicative only") {
		t.Errorf("a fan-out at the goal's size is said missing or indicative:\n%s", b.String())
	}

	// No fan-out, and one at a smaller size.
	b.Reset()
	targetsSection(&b, withRuns(2, 2), nil)
	wantAll(t, "without a fan-out, the targets lack", b.String(), []string{"Not checked here: one brain to 1,000 agents: no fan-out with these results"})
	if strings.Contains(b.String(), "30,000 services against 10,000:") {
		t.Errorf("30,000 ran, yet is said not checked:\n%s", b.String())
	}
	b.Reset()
	targetsSection(&b, withRuns(2, 2), fanoutResult(fanoutFigures(50, 100, 12, 13)))
	wantAll(t, "with a small fan-out, the targets lack", b.String(), []string{
		"The fan-out ran 50 agents at 100 Services, not the 1,000 agents at 10,000 Services its goal is stated at: its rows are indicative only."})
}

func TestPlan30k(t *testing.T) {
	for _, c := range []struct {
		w          with30k
		sizesGiven bool
		sizes      []int
		add, auto  bool
		note       string
	}{
		{"auto", false, []int{100, 1000, 5000, 10000}, false, true, ""},
		{"auto", true, []int{100, 10000}, false, false, "--sizes without them, and no --with-30k"},
		{"true", true, []int{100}, true, false, "30,000 services ran: --with-30k"},
		{"true", false, []int{100, 1000, 5000, 10000}, true, false, "--with-30k"},
		{"false", false, []int{100, 1000, 5000, 10000}, false, false, "--with-30k=false"},
		{"true", true, []int{10000, 30000}, false, false, "in --sizes"},
	} {
		add, auto, note := plan30k(c.w, c.sizesGiven, c.sizes)
		if add != c.add || auto != c.auto || !strings.Contains(note, c.note) || (c.note == "") != (note == "") {
			t.Errorf("plan30k(%s, %v, %v) = %v, %v, %q; want %v, %v, %q", c.w, c.sizesGiven, c.sizes, add, auto, note, c.add, c.auto, c.note)
		}
	}
}

func TestDecide30k(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		name   string
		mem    int64
		took   time.Duration
		failed bool
		run    bool
		note   string
	}{
		{"room and time", 19 * gib, 5 * time.Minute, false, true,
			"30,000 services ran: 19.0 GiB of memory available after 10,000 (the rule asks for 16.0 GiB), and 10,000 took 5m0s, " +
				"so 30,000 were expected to take about 25m0s (5 x), within --budget-30k 2h0m0s"},
		{"just the memory, just the time", 16 * gib, 24 * time.Minute, false, true, "within --budget-30k"},
		{"memory short", 16*gib - 1, time.Minute, false, false,
			"30,000 services were not run: 16.0 GiB of memory available after 10,000, where the rule asks for 16.0 GiB"},
		{"time short", 19 * gib, 24*time.Minute + time.Second, false, false,
			"30,000 services were not run: 10,000 took 24m1s, so 30,000 would take about 2h0m0s (5 x), more than --budget-30k 2h0m0s"},
		{"10,000 failed", 19 * gib, time.Minute, true, false, "the 10,000-service run failed"},
	} {
		run, note := decide30k(c.mem, c.took, 2*time.Hour, c.failed)
		if run != c.run || !strings.Contains(note, c.note) {
			t.Errorf("%s: decide30k = %v, %q; want %v, %q", c.name, run, note, c.run, c.note)
		}
	}
}

func TestParseMemAvailable(t *testing.T) {
	got, err := parseMemAvailable("MemTotal:       24523740 kB\nMemFree:         7000000 kB\nMemAvailable:   19999744 kB\nBuffers: 1 kB\n")
	if err != nil || got != 19999744*1024 {
		t.Errorf("parseMemAvailable = %d, %v; want %d", got, err, 19999744*1024)
	}
	if _, err := parseMemAvailable("MemTotal: 1 kB\n"); err == nil {
		t.Error("no MemAvailable, no error")
	}
}

// --with-30k is auto unless given; alone it means true.
func TestWith30kFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want with30k
		err  bool
	}{
		{nil, "auto", false},
		{[]string{"--with-30k"}, "true", false},
		{[]string{"--with-30k=false"}, "false", false},
		{[]string{"--with-30k=auto"}, "auto", false},
		{[]string{"--with-30k=maybe"}, "", true},
	} {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		w := with30k("auto")
		fs.Var(&w, "with-30k", "")
		err := fs.Parse(c.args)
		if (err != nil) != c.err || (!c.err && w != c.want) {
			t.Errorf("%v: %q, %v; want %q (error: %v)", c.args, w, err, c.want, c.err)
		}
	}
}

// --report-only writes the fan-out from the stored fanout.json, beside the
// sizes' results.
func TestReportWithFanout(t *testing.T) {
	dir, resultsDir := t.TempDir(), t.TempDir()
	for _, r := range sampleResults() {
		if err := writeResult(resultsDir, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeFanout(resultsDir, fanoutResult(fanoutFigures(1000, 10000, 1500, 2000))); err != nil {
		t.Fatal(err)
	}
	if err := report(t.TempDir(), dir, resultsDir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	wantAll(t, "the page lacks", page, []string{
		"### Fan-out: one kpng brain to many agents",
		"| one brain to many agents: a change to all agents, p99 (ms) | kpng brain, 1,000 agents, 10,000 Services | 1500.0 |  |  |  | < 1000 | **no** |",
		"- **one brain to many agents: a change to all agents, p99 (ms)**, kpng brain, 1,000 agents, 10,000 Services: 1500.0 ms where the goal is under 1000",
	})
	if f, d := strings.Index(page, "### Fan-out"), strings.Index(page, "### Targets"); f < 0 || d < 0 || f > d {
		t.Error("the fan-out section is not before the targets")
	}
}
