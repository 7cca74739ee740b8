package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// SizeResult is one run at one size: the proxies side by side.
type SizeResult struct {
	Services            int       `json:"services"`
	EndpointsPerService int       `json:"endpoints_per_service"`
	Started             time.Time `json:"started"`
	Finished            time.Time `json:"finished"`
	Command             string    `json:"command"`
	// Run is the same for every size of one bench run (its start and
	// process id): issue 20's 30,000 against 10,000 is checked within
	// a run.
	Run        string `json:"run,omitempty"`
	KpngCommit string `json:"kpng_commit"`
	// Note30k says why 30,000 services were or were not part of the run
	// (--with-30k and its rule, size30k.go).
	Note30k string `json:"note_30k,omitempty"`
	// Groups are the proxies' names in the groups that ran one after the
	// other (each from its cold start to its last reading), in that
	// order; empty in results from before groups, where all ran at once.
	Groups [][]string `json:"groups,omitempty"`
	// InTurns are the phases that ran once per proxy of a group, the
	// group's other proxies stopped meanwhile (the churn and the burst);
	// empty in results from before turns, where a group's proxies went
	// through each phase at once.
	InTurns []string `json:"in_turns,omitempty"`
	// Versions are what the programs under test say of themselves.
	Versions       Versions `json:"versions"`
	Machine        Machine  `json:"machine"`
	PreloadSeconds float64  `json:"preload_seconds"`
	ChurnRate      float64  `json:"churn_rate"`
	ChurnSeconds   float64  `json:"churn_seconds"`
	BurstUpdates   int      `json:"burst_updates"`
	NewServices    int      `json:"new_services"`
	ServiceRate    float64  `json:"service_rate"`
	// IptablesVariant is the variant both iptables proxies were given:
	// legacy or nft.
	IptablesVariant string `json:"iptables_variant,omitempty"`
	// StartTimeout and DrainTimeout are the longest waits for a first
	// sync and for catching up after a phase.
	StartTimeout string `json:"start_timeout,omitempty"`
	DrainTimeout string `json:"drain_timeout,omitempty"`
	// ProbeSeconds is how long each dataplane probe ran; ProbeRounds how
	// many times its targets alternated (0: probeRounds, before it was
	// recorded).
	ProbeSeconds float64 `json:"probe_seconds,omitempty"`
	ProbeRounds  int     `json:"probe_rounds,omitempty"`
	// EBPFOnly: kpng-ebpf ran alone (--ebpf-only), without the workload
	// phases, for issue 21's figures; OneChanges and OneChangeRate are
	// that run's single endpoint changes.
	EBPFOnly      bool    `json:"ebpf_only,omitempty"`
	OneChanges    int     `json:"one_changes,omitempty"`
	OneChangeRate float64 `json:"one_change_rate,omitempty"`
	// LoadDuring are the 1-minute load averages sampled during the run:
	// the machine is shared.
	LoadDuring []float64      `json:"load_during"`
	Proxies    []*ProxyResult `json:"proxies"`
}

// Versions are the first line of each program's --version.
type Versions struct {
	KubeProxy     string `json:"kube_proxy,omitempty"`
	KubeAPIServer string `json:"kube_apiserver,omitempty"`
	// Iptables is the variant's, as both iptables proxies ran it
	// ("iptables v1.8.9 (legacy)").
	Iptables string `json:"iptables,omitempty"`
	Nft      string `json:"nft,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUModel  string     `json:"cpu_model"`
	Cores     int        `json:"cores"`
	Kernel    string     `json:"kernel"`
	LoadStart [3]float64 `json:"load_start"`
	LoadEnd   [3]float64 `json:"load_end"`
}

// ProxyResult is one proxy's figures at one size.
type ProxyResult struct {
	Name      string `json:"name"`
	Reference string `json:"reference,omitempty"`
	// Error says why figures are missing (the proxy exited, timed out...).
	Error string `json:"error,omitempty"`
	// FirstSyncSeconds is the time from process start to the end of its
	// first complete sync (0: none).
	FirstSyncSeconds float64 `json:"first_sync_seconds"`
	// NoSyncWithin is the start timeout when the proxy did not complete
	// a sync within it (then it was stopped, and has no other figure).
	NoSyncWithin string `json:"no_sync_within,omitempty"`
	// ColdStartCPUSeconds and RSSAfterStartMB are the proxy's CPU time
	// (with its waited-for children's) and VmRSS read when its first
	// complete sync was seen in its log.
	ColdStartCPUSeconds float64 `json:"cold_start_cpu_seconds"`
	RSSAfterStartMB     float64 `json:"rss_after_start_mb"`
	// ColdStartSysCPUSeconds is the system (kernel) part of
	// ColdStartCPUSeconds: loading the first ruleset is mostly that.
	ColdStartSysCPUSeconds float64 `json:"cold_start_sys_cpu_seconds,omitempty"`
	// ColdStartChildSysCPUSeconds is the children's part of
	// ColdStartSysCPUSeconds (nft, iptables-restore): the rest is the
	// process's own (netlink writes, page faults, reading the API).
	ColdStartChildSysCPUSeconds float64 `json:"cold_start_child_sys_cpu_seconds,omitempty"`
	// ListedSeconds is the time from process start until the proxy's
	// log said it had listed every object its first sync needs from the
	// API server (0: not seen); FirstSyncTookSeconds is that first
	// sync's own duration as its log line gives it. The rest of
	// FirstSyncSeconds is between the two: computing before the sync,
	// or waiting.
	ListedSeconds        float64 `json:"listed_seconds,omitempty"`
	FirstSyncTookSeconds float64 `json:"first_sync_took_seconds,omitempty"`
	// Reload is the proxy's ruleset at the end of its group, loaded
	// again alone into an empty namespace (nil: not measured).
	Reload *RulesetLoad `json:"reload,omitempty"`
	// RSSEndMB and PeakRSSMB are VmRSS and VmHWM at the end of the
	// proxy's group.
	RSSEndMB  float64 `json:"rss_end_mb"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// Phases are the workloads after the cold start: churn, burst,
	// create, delete.
	Phases map[string]*PhaseResult `json:"phases"`
	// Probes are the dataplane probes: to the probe Service's cluster IP,
	// and to its pod directly (no service).
	Probes []ProbeResult `json:"probes,omitempty"`
	// LegacyNATRules and NftTables say where the proxy's rules were at
	// the end: the rules of its namespace's legacy nat table, and its
	// nf_tables tables ("ip nat" is iptables-nft's).
	LegacyNATRules int `json:"legacy_nat_rules"`
	// BPFMaps is kpng-ebpf's maps' memory at the end of the run, by
	// pinned map: the kernel's accounting (memlock in each map's
	// fdinfo), which the process's RSS does not include; BPFMapsMB its
	// total.
	BPFMaps   map[string]int64 `json:"bpf_maps_memlock_bytes,omitempty"`
	BPFMapsMB float64          `json:"bpf_maps_mb,omitempty"`
	// BPFPrograms are kpng-ebpf's programs' run counts and run times
	// during the dataplane probe (the kernel's BPF run-time statistics,
	// switched on for the probe), by pinned link ("connect4",
	// "tcx_ingress_pod0").
	BPFPrograms map[string]ProgramRun `json:"bpf_programs,omitempty"`
	// BPFProgramsByTarget are the same for a short probe of each target
	// alone ("clusterip", "podip"), with the probe's connections under
	// "connections": the programs' time on a ClusterIP's connection
	// against a pod IP's.
	BPFProgramsByTarget map[string]map[string]ProgramRun `json:"bpf_programs_by_target,omitempty"`
	// OneChange is the backend's own time for syncs that applied one
	// endpoint change (--ebpf-only), from its log.
	OneChange    *OneChangeResult `json:"one_change,omitempty"`
	NftTables    []string         `json:"nft_tables,omitempty"`
	RulesChecked bool             `json:"rules_checked,omitempty"`
}

// ProgramRun is one BPF program's runs over a span of time, from the
// kernel's statistics (run_cnt and run_time_ns in the program's fdinfo).
type ProgramRun struct {
	Runs      uint64 `json:"runs"`
	RuntimeNs uint64 `json:"runtime_ns"`
}

// NsPerRun is the program's mean run time (NaN without runs).
func (r ProgramRun) NsPerRun() float64 {
	if r.Runs == 0 {
		return math.NaN()
	}
	return float64(r.RuntimeNs) / float64(r.Runs)
}

// OneChangeResult is what the proxy's own log says of the syncs that
// applied exactly one changed Service (set=1, nothing else): the sync's
// duration as the backend driver measures it around the backend's Sync
// ("took"), so neither the API server nor the watch is in it.
type OneChangeResult struct {
	// Changes is how many single endpoint changes were made; Syncs how
	// many syncs applied exactly one (the others were coalesced, or
	// fell into a periodic resync).
	Changes int     `json:"changes"`
	Syncs   int     `json:"syncs"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MeanMs  float64 `json:"mean_ms"`
	MaxMs   float64 `json:"max_ms"`
	// LoadDuring is the 1-minute load average when the changes ended.
	LoadDuring float64 `json:"load"`
}

// PhaseResult is what one proxy did during one workload, from metrics
// scraped before it and after the proxy caught up.
type PhaseResult struct {
	// Changes is how many API writes the phase made.
	Changes int `json:"changes"`
	// Syncs and the sync duration quantiles, from
	// kubeproxy_sync_proxy_rules_duration_seconds{ip_family="IPv4"}.
	Syncs          float64 `json:"syncs"`
	SyncP50        float64 `json:"sync_p50"`
	SyncP99        float64 `json:"sync_p99"`
	SyncSumSeconds float64 `json:"sync_sum_seconds"`
	// PartialSyncs and PartialSyncSumSeconds: the syncs that applied
	// only what changed, and their time
	// (kubeproxy_sync_partial_proxy_rules_duration_seconds); their mean
	// is what one change costs to apply when changes come one by one.
	PartialSyncs          float64 `json:"partial_syncs,omitempty"`
	PartialSyncSumSeconds float64 `json:"partial_sync_sum_seconds,omitempty"`
	// NetProg*: kubeproxy_network_programming_duration_seconds.
	NetProgCount float64 `json:"netprog_count"`
	NetProgP50   float64 `json:"netprog_p50"`
	NetProgP99   float64 `json:"netprog_p99"`
	// NetProgP99Bucket is the upper bound of the bucket holding p99: what
	// the histogram's resolution can promise.
	NetProgP99Bucket float64 `json:"netprog_p99_bucket"`
	// CPUSeconds is the CPU time used from the start of the phase until
	// the proxy caught up; WallSeconds that time.
	CPUSeconds  float64 `json:"cpu_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	// CaughtUpSeconds is from the phase's start to the end of the sync
	// that applied its last change; CaughtUp is false on a timeout.
	CaughtUpSeconds float64 `json:"caught_up_seconds"`
	CaughtUp        bool    `json:"caught_up"`
}

// Phase names, in the order they run.
const (
	phaseChurn  = "churn"
	phaseBurst  = "burst"
	phaseCreate = "create"
	phaseDelete = "delete"
)

var phases = []string{phaseChurn, phaseBurst, phaseCreate, phaseDelete}

func resultPath(dir string, services int) string {
	return filepath.Join(dir, fmt.Sprintf("results-%d.json", services))
}

func writeResult(dir string, r *SizeResult) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(resultPath(dir, r.Services), append(b, '\n'), 0o644)
}

// readResults reads every results-N.json of dir, by size.
func readResults(dir string) ([]*SizeResult, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []*SizeResult
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "results-") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var r SizeResult
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		out = append(out, &r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Services < out[j].Services })
	return out, nil
}

// RulesetLoad is what loading a saved ruleset into an empty namespace
// took: wall time, and the loading commands' (nft -f, iptables-restore)
// user and system CPU time; the system time is the kernel's work for it.
type RulesetLoad struct {
	WallSeconds float64 `json:"wall_seconds"`
	UserSeconds float64 `json:"user_seconds"`
	SysSeconds  float64 `json:"sys_seconds"`
}

// proxy returns the named proxy's result, or nil.
func (r *SizeResult) proxy(name string) *ProxyResult {
	for _, p := range r.Proxies {
		if p.Name == name {
			return p
		}
	}
	return nil
}
