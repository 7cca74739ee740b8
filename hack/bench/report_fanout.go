package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// fanoutSection describes the fan-out of fo (nil: none with these
// results) and gives its figures.
func fanoutSection(b *strings.Builder, fo *FanoutResult) {
	if fo == nil {
		return
	}
	b.WriteString("### Fan-out: one kpng brain to many agents\n\n")
	m := fo.Machine
	fmt.Fprintf(b, "Run %s on %d cores (%s), kernel %s, after the sizes above with no proxy and no API server "+
		"left running. Load average at start %.2f, at end %.2f; 1-minute load during the run: %s. kpng at commit %s. "+
		"Command: `%s` (from `%s`).\n\n",
		runSpan(fo.Started, fo.Finished), m.Cores, m.CPUModel, m.Kernel,
		m.LoadStart[0], m.LoadEnd[0], loadRange(fo.LoadDuring), orDefault(fo.KpngCommit, "not recorded"),
		fo.fanoutCommand(), fo.Command)
	f := fo.Figures
	if f == nil {
		fmt.Fprintf(b, "**The fan-out failed in this run**: %s.\n\n", orDefault(fo.Error, "no figures recorded"))
		return
	}
	light := ""
	if f.API == "globalv1" {
		light = fmt.Sprintf(" %s of the agents are complete node agents (their own copy of the cluster, and their "+
			"node's view computed from it with `local.Feed`, as `kpng api --node-name N ... to-local`), which hold a "+
			"change once their node's view has it; the %s others receive and decode every batch but keep nothing "+
			"(a thousand complete agents of a 10,000-Service cluster do not fit one test machine, and the cost "+
			"under test is the serving brain's: docs/performance.md, \"Fan-out\").", thousands(f.FullAgents), thousands(f.Agents-f.FullAgents))
	}
	fmt.Fprintf(b, "hack/bench-fanout: one brain process (a cluster store of %s ClusterIP Services with one EndpointSlice "+
		"of %d endpoints each and a Node per agent, served by package `server` over %s) and %s node agents in another "+
		"process, each on its own gRPC connection over a unix socket.%s %s changes, made one at a time, each "+
		"rewriting one endpoint of one EndpointSlice; \"a change to all agents\" is, per change, the time from the "+
		"store write to the last agent holding it, and its quantiles are over the changes (nearest rank: of 100 "+
		"changes, the p99 is the 99th fastest). The brain and the agents share the machine's cores.\n\n",
		thousands(f.Services), f.EndpointsPerService, f.API, thousands(f.Agents), light, thousands(f.Changes))

	fmt.Fprintf(b, "| %s Services, %s agents | |\n|---|---:|\n", thousands(f.Services), thousands(f.Agents))
	row := func(name, value string) { fmt.Fprintf(b, "| %s | %s |\n", name, value) }
	row("**a change to all agents: p50 / p99 / max (ms)**", fmt.Sprintf("%s / **%s** / %s",
		f1(f.allAgents(0.5)), f1(f.allAgents(0.99)), f1(f.allAgents(1))))
	row("a change to one agent, over every agent and change: p50 / p99 (ms)", fmt.Sprintf("%s / %s", f1(f.OneAgentP50Ms), f1(f.OneAgentP99Ms)))
	if f.FullAgents > 0 {
		row("a change to a complete agent's node view: p50 / p99 (ms)", fmt.Sprintf("%s / %s", f1(f.FullAgentsP50Ms), f1(f.FullAgentsP99Ms)))
	}
	row("brain CPU per change (ms)", f1(f.BrainCPUPerChangeMs))
	row("bytes the brain sent per change: all agents (per agent)", fmt.Sprintf("%s (%s)",
		thousands64(f.BrainBytesSentPerChange), thousands64(f.BrainBytesSentPerChange/int64(f.Agents))))
	row("bytes the brain read per change (the agents' requests for their next batch)", thousands64(f.BrainBytesReadPerChange))
	row("initial full state to every agent: time (s), brain CPU (s), bytes per agent (KiB)", fmt.Sprintf("%s, %s, %s",
		f1(f.InitialSeconds), f1(f.InitialBrainCPUSeconds), thousands64(f.InitialBytesPerAgent>>10)))
	row("brain RSS: store loaded, no agent / every agent synced (peak) / after the changes (MiB)", fmt.Sprintf("%s / %s (%s) / %s",
		f0(mb(f.BrainRSSIdleBytes)), f0(mb(f.BrainRSSSyncedBytes)), f0(mb(f.BrainPeakRSSSyncedBytes)), f0(mb(f.BrainRSSAfterChangesBytes))))
	row("**brain memory per agent (KiB)**", f0(f.brainBytesPerAgent()/1024))
	row("the agents' process RSS once synced (MiB)", f0(mb(f.AgentsRSSBytes)))
	b.WriteString("\n")
	fmt.Fprintf(b, "**Brain memory per agent** is the brain process's VmRSS once all %s agents had their initial state, "+
		"less its VmRSS with the store loaded before any agent connected, divided by %s: the connections (gRPC's "+
		"buffers, each stream's state) and what the brain builds once for all of them when the first asks (the "+
		"journal's shared copy of the full state), so one more agent costs at most that.\n\n",
		thousands(f.Agents), thousands(f.Agents))
}

// fanoutRows are issue 20's fan-out targets: a change to every agent in
// p99 under 1 s, and the brain's memory per agent, stated.
func fanoutRows(fo *FanoutResult) []targetRow {
	if fo == nil {
		return nil
	}
	const name = "one brain to many agents: a change to all agents, p99 (ms)"
	f := fo.Figures
	if f == nil {
		return []targetRow{{name: name, proxy: "kpng brain", figure: "failed", goal: fmt.Sprintf("< %d", fanoutGoalMs),
			met: "no data", short: fmt.Sprintf("**%s**: the fan-out failed: %s.", name, orDefault(fo.Error, "no figures recorded"))}}
	}
	who := fmt.Sprintf("kpng brain, %s agents, %s Services", thousands(f.Agents), thousands(f.Services))
	p99 := f.allAgents(0.99)
	row := targetRow{name: name, proxy: who, figure: f1(p99), goal: fmt.Sprintf("< %d", fanoutGoalMs), met: "no data"}
	switch {
	case math.IsNaN(p99):
	case p99 < fanoutGoalMs:
		row.met = "yes"
	default:
		row.met = "**no**"
		row.short = fmt.Sprintf("**%s**, %s: %s ms where the goal is under %d (1-minute load %s during the fan-out).",
			name, who, f1(p99), fanoutGoalMs, loadRange(fo.LoadDuring))
	}
	if !f.atTargetSize() && row.met != "no data" {
		row.met += " (smaller than the goal's size)"
	}
	mem := targetRow{name: "one brain to many agents: brain memory per agent (KiB)", proxy: who,
		figure: f0(f.brainBytesPerAgent() / 1024), goal: "stated", met: "–"}
	return []targetRow{row, mem}
}

// linearityRows are issue 20's "30k at most 3.3 x 10k": each kpng
// backend's cold start at 30,000 services over its own at 10,000, checked
// when both sizes come from one run.
func linearityRows(results []*SizeResult) []targetRow {
	r10, r30 := sizeResult(results, targetServices), sizeResult(results, size30k)
	if r10 == nil {
		return nil
	}
	const name = "cold start, 30,000 / 10,000 services (s)"
	var rows []targetRow
	for _, names := range targetPairs {
		k10 := r10.proxy(names[0])
		if k10 == nil {
			continue
		}
		rv := nz(k10.FirstSyncSeconds)
		row := targetRow{name: name, proxy: names[0], figure: "not run", against: names[0] + " at 10,000",
			refValue: f1(rv), ratio: "–", goal: fmt.Sprintf("≤ %g x", linearityGoal), met: "–"}
		var k30 *ProxyResult
		if r30 != nil {
			k30 = r30.proxy(names[0])
		}
		switch {
		case r30 == nil:
		case k30 == nil:
			row.figure, row.met = "–", "no data"
		case k30.NoSyncWithin != "":
			row.figure, row.met = "did not sync within "+k30.NoSyncWithin, "no data"
			if d, err := time.ParseDuration(k30.NoSyncWithin); err == nil && d.Seconds() > linearityGoal*rv && sameRun(r10, r30) {
				row.met = "**no**"
				row.short = fmt.Sprintf("**%s**, %s: did not sync within %s at 30,000 services, more than %g x its %s s at 10,000.",
					name, names[0], k30.NoSyncWithin, linearityGoal, f1(rv))
			}
		default:
			kv := nz(k30.FirstSyncSeconds)
			row.figure, row.ratio = f1(kv), ratio(kv, rv)
			q := kv / rv
			switch {
			case math.IsNaN(q) || math.IsInf(q, 0):
				row.met = "no data"
			case !sameRun(r10, r30):
				row.met = "not the same run"
				row.short = fmt.Sprintf("**%s**, %s: the 10,000- and 30,000-service results are not known to come from "+
					"one run (started %s and %s), and two runs' loads differ: not checked.", name, names[0],
					r10.Started.Format("2006-01-02 15:04"), r30.Started.Format("2006-01-02 15:04"))
			case q <= linearityGoal:
				row.met = "yes"
			default:
				row.met = "**no**"
				row.short = fmt.Sprintf("**%s**, %s: %s s at 30,000 against %s s at 10,000, a ratio of %s where the goal is "+
					"at most %g (it would need %s s or less).", name, names[0], f1(kv), f1(rv), ratio(kv, rv), linearityGoal, f1(linearityGoal*rv))
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// sameRun says whether two sizes' results come from one bench run.
func sameRun(a, b *SizeResult) bool { return a.Run != "" && a.Run == b.Run }

func sizeResult(results []*SizeResult, n int) *SizeResult {
	for _, r := range results {
		if r.Services == n {
			return r
		}
	}
	return nil
}

// targetNotes says which of issue 20's targets these results cannot
// check, and why, and which they check at a smaller size than stated
// ("" when neither).
func targetNotes(results []*SizeResult, fo *FanoutResult) string {
	var missing []string
	r10 := sizeResult(results, targetServices)
	switch {
	case r10 == nil:
		missing = append(missing, "30,000 services against 10,000 (10,000 were not run).")
	case sizeResult(results, size30k) == nil:
		why := r10.Note30k
		if why == "" {
			why = "30,000 services were not run (the run recorded no reason: it predates the bench's rule for them)"
		}
		missing = append(missing, "30,000 services against 10,000: "+strings.TrimSuffix(why, ".")+".")
	}
	if fo == nil {
		missing = append(missing, "one brain to 1,000 agents: no fan-out with these results (they predate the bench's "+
			"fan-out, or it ran with --fanout-agents 0); docs/performance.md, \"Fan-out\", has it measured apart.")
	}
	var out []string
	if len(missing) > 0 {
		out = append(out, "Not checked here: "+strings.Join(missing, " "))
	}
	if fo != nil && fo.Figures != nil && !fo.Figures.atTargetSize() {
		out = append(out, fmt.Sprintf("The fan-out ran %s agents at %s Services, not the %s agents at %s Services "+
			"its goal is stated at: its rows are indicative only.", thousands(fo.Figures.Agents), thousands(fo.Figures.Services),
			thousands(fanoutTargetAgents), thousands(fanoutTargetServices)))
	}
	return strings.Join(out, " ")
}
