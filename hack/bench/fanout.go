package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The fan-out is issue 20's "one brain to 1,000 agents over real gRPC
// connections, 10k Services: a change reaches every agent, p99 < 1 s;
// brain memory per agent stated". hack/bench-fanout measures it (one
// brain process, the agents in another, each on its own gRPC connection
// over a unix socket); the bench runs it once per run, after the sizes,
// when no proxy and no API server take the CPU, and keeps its figures in
// <out>/fanout.json beside the sizes' results-N.json.
const (
	fanoutTargetAgents   = 1000
	fanoutTargetServices = 10000
	// fanoutGoalMs bounds the p99 of a change's time to every agent.
	fanoutGoalMs = 1000
	// fanoutTimeout bounds the whole fan-out run: at 10,000 services and
	// 1,000 agents it took under two minutes on the loaded 2-core
	// machine (docs/performance.md, "Fan-out"); bench-fanout gives each
	// change a minute itself.
	fanoutTimeout = 30 * time.Minute
	fanoutFile    = "fanout.json"
)

// FanoutResult is the fan-out of one bench run.
type FanoutResult struct {
	// Run is the bench run's identity, the same in its results-N.json.
	Run      string    `json:"run,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Command is the bench's; Args bench-fanout's, without --json.
	Command    string    `json:"command"`
	Args       []string  `json:"args"`
	KpngCommit string    `json:"kpng_commit"`
	Machine    Machine   `json:"machine"`
	LoadDuring []float64 `json:"load_during"`
	// Error says why there are no figures.
	Error   string         `json:"error,omitempty"`
	Figures *FanoutFigures `json:"figures,omitempty"`
}

// FanoutSettings are bench-fanout's settings, as its --json writes them
// (hack/bench-fanout's jsonRun).
type FanoutSettings struct {
	API                 string `json:"api"`
	Agents              int    `json:"agents"`
	FullAgents          int    `json:"full_agents"`
	EndpointsPerService int    `json:"endpoints_per_service"`
	Changes             int    `json:"changes"`
}

// FanoutSize is one cluster size's figures, as bench-fanout's --json
// writes them (hack/bench-fanout's jsonSize): times in milliseconds (the
// initial state's in seconds), memory and traffic in bytes.
type FanoutSize struct {
	Services                  int       `json:"services"`
	ChangeToAllAgentsMs       []float64 `json:"change_to_all_agents_ms"`
	OneAgentP50Ms             float64   `json:"one_agent_p50_ms"`
	OneAgentP99Ms             float64   `json:"one_agent_p99_ms"`
	FullAgentsP50Ms           float64   `json:"full_agents_p50_ms"`
	FullAgentsP99Ms           float64   `json:"full_agents_p99_ms"`
	BrainCPUPerChangeMs       float64   `json:"brain_cpu_per_change_ms"`
	BrainBytesSentPerChange   int64     `json:"brain_bytes_sent_per_change"`
	BrainBytesReadPerChange   int64     `json:"brain_bytes_read_per_change"`
	InitialSeconds            float64   `json:"initial_seconds"`
	InitialBrainCPUSeconds    float64   `json:"initial_brain_cpu_seconds"`
	InitialBytesPerAgent      int64     `json:"initial_bytes_per_agent"`
	BrainRSSIdleBytes         int64     `json:"brain_rss_idle_bytes"`
	BrainRSSSyncedBytes       int64     `json:"brain_rss_synced_bytes"`
	BrainPeakRSSSyncedBytes   int64     `json:"brain_peak_rss_synced_bytes"`
	BrainRSSAfterChangesBytes int64     `json:"brain_rss_after_changes_bytes"`
	AgentsRSSBytes            int64     `json:"agents_rss_bytes"`
}

// FanoutFigures are the settings and the one cluster size of a
// bench-fanout run.
type FanoutFigures struct {
	FanoutSettings
	FanoutSize
}

// parseFanout reads bench-fanout's --json, which must hold one cluster
// size with a time for every change.
func parseFanout(b []byte) (*FanoutFigures, error) {
	var out struct {
		FanoutSettings
		Sizes []FanoutSize `json:"sizes"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	if len(out.Sizes) != 1 {
		return nil, fmt.Errorf("%d cluster sizes, want 1", len(out.Sizes))
	}
	f := &FanoutFigures{FanoutSettings: out.FanoutSettings, FanoutSize: out.Sizes[0]}
	switch {
	case f.Agents < 1:
		return nil, fmt.Errorf("%d agents", f.Agents)
	case f.Changes < 1 || len(f.ChangeToAllAgentsMs) != f.Changes:
		return nil, fmt.Errorf("%d changes, %d times to all agents", f.Changes, len(f.ChangeToAllAgentsMs))
	case f.BrainRSSIdleBytes <= 0 || f.BrainRSSSyncedBytes <= 0:
		return nil, fmt.Errorf("the brain's RSS is missing (idle %d, synced %d bytes)", f.BrainRSSIdleBytes, f.BrainRSSSyncedBytes)
	}
	return f, nil
}

// allAgents is the q-quantile (nearest rank) of a change's time to every
// agent, over the changes, in milliseconds.
func (f *FanoutFigures) allAgents(q float64) float64 {
	s := slices.Sorted(slices.Values(f.ChangeToAllAgentsMs))
	return quantileSorted(s, q)
}

// brainBytesPerAgent is the brain's memory per agent: its VmRSS once
// every agent had its initial state, less its VmRSS with the store loaded
// and no agent connected, over the agents. It holds the connections
// (gRPC's buffers, each stream's state) and what the brain builds once
// for all agents when the first asks (the journal's shared copy of the
// full state): the cost of one more agent is at most this.
func (f *FanoutFigures) brainBytesPerAgent() float64 {
	return float64(f.BrainRSSSyncedBytes-f.BrainRSSIdleBytes) / float64(f.Agents)
}

// atTargetSize says whether the fan-out ran at the size issue 20 states
// its goal at (or larger).
func (f *FanoutFigures) atTargetSize() bool {
	return f.Agents >= fanoutTargetAgents && f.Services >= fanoutTargetServices
}

// fanoutServices is the fan-out's number of Services: given, or the
// largest size of the run, at most the 10,000 the goal is stated at.
func fanoutServices(sizes []int, given int) int {
	if given > 0 {
		return given
	}
	return min(slices.Max(sizes), fanoutTargetServices)
}

// runFanout runs bench-fanout with cfg's agents and changes at services,
// and writes <out>/fanout.json; its output goes to <out>/fanout/. A failed
// run is written too, with its error: the page then says the fan-out
// failed rather than showing an older run's figures.
func runFanout(ctx context.Context, cfg *config, services int) (*FanoutResult, error) {
	dir := filepath.Join(cfg.outDir, "fanout")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--services", strconv.Itoa(services), "--agents", strconv.Itoa(cfg.fanoutAgents),
		"--changes", strconv.Itoa(cfg.fanoutChanges)}
	jsonPath, logPath := filepath.Join(dir, "bench-fanout.json"), filepath.Join(dir, "bench-fanout.log")
	res := &FanoutResult{Run: cfg.run, Started: time.Now().UTC(), Command: cfg.command, Args: args,
		KpngCommit: cfg.headCommit, Machine: machine()}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadMu sync.Mutex
	go sampleLoad(loadCtx, &loadMu, &res.LoadDuring)

	status.set(services, fmt.Sprintf("fan-out: one brain to %d agents, %d changes (log: %s)", cfg.fanoutAgents, cfg.fanoutChanges, logPath))
	err := runLogged(ctx, fanoutTimeout, logPath, cfg.bins.benchFanout, append(args, "--json", jsonPath)...)
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(jsonPath); err == nil {
			res.Figures, err = parseFanout(b)
		}
	}
	if err != nil {
		res.Error = fmt.Sprintf("bench-fanout: %v (log: %s)", err, logPath)
	}
	stopLoad()
	loadMu.Lock()
	res.Machine.LoadEnd = loadAvg()
	res.Finished = time.Now().UTC()
	loadMu.Unlock()
	if werr := writeFanout(cfg.outDir, res); werr != nil {
		return res, werr
	}
	if res.Error != "" {
		return res, errors.New(res.Error)
	}
	return res, nil
}

// runLogged runs bin with args, its output to logPath, for at most
// timeout; it dies with the bench.
func runLogged(ctx context.Context, timeout time.Duration, logPath, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%v)", err, ctx.Err())
		}
		return err
	}
	return nil
}

func writeFanout(dir string, r *FanoutResult) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fanoutFile), append(b, '\n'), 0o644)
}

// readFanout reads dir's fanout.json: nil, without error, when there is
// none (results from before the bench ran the fan-out).
func readFanout(dir string) (*FanoutResult, error) {
	b, err := os.ReadFile(filepath.Join(dir, fanoutFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r FanoutResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", fanoutFile, err)
	}
	return &r, nil
}

// fanoutCommand is the bench-fanout command line that was run, as it
// reads from the repository.
func (r *FanoutResult) fanoutCommand() string {
	return strings.Join(append([]string{"go run ./hack/bench-fanout"}, r.Args...), " ")
}
