package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// The bench network, inside the bench's own namespace: a bridge that the
// API server listens on, and one veth per proxy namespace.
const (
	benchBridge   = "kpbench0"
	bridgeAddr    = "10.210.0.1"
	bridgePrefix  = 24
	proxyAddrBase = 10 // proxy i is 10.210.0.(10+i)
)

// settle is how long after a phase's last write a proxy is given to have
// received it before "no pending change" may be believed: watch events
// take milliseconds, even on a loaded machine.
const settle = 2 * time.Second

type config struct {
	sizes        []int
	churnRate    float64
	churnFor     time.Duration
	burst        int
	newServices  int
	serviceRate  float64
	startTimeout time.Duration
	drainTimeout time.Duration
	probeFor     time.Duration
	// ebpfOnly runs kpng-ebpf alone, without the workload phases, and
	// makes oneChanges single endpoint changes at oneChangeRate per
	// second (issue 21's figures).
	ebpfOnly      bool
	oneChanges    int
	oneChangeRate float64
	// cpuProfiles takes each proxy's CPU profile over its churn.
	cpuProfiles bool
	outDir      string
	runID       string
	// run tells this run's results from other runs' (SizeResult.Run).
	run         string
	bins        binaries
	command     string
	kpngVersion string
	// headCommit is the commit bench-fanout (and kpng, unless given)
	// was built from.
	headCommit string
	versions   Versions
	// fanoutAgents (0: no fan-out), fanoutServices (0: the largest
	// size, at most 10,000) and fanoutChanges are the fan-out's.
	fanoutAgents, fanoutServices, fanoutChanges int
	// note30k says why 30,000 services are or are not in the run.
	note30k string
	// iptablesVariant is legacy or nft; iptablesPath the directory that
	// makes `iptables` the variant's (iptablesPathDir).
	iptablesVariant string
	iptablesPath    string
	// together runs every proxy at once instead of group after group
	// (groupProxies).
	together bool
	// groups, if set, are the only groups of proxies run (--groups).
	groups []string
}

// runSize runs the whole bench at one size, and writes its result.
func runSize(ctx context.Context, cfg *config, n int) (res *SizeResult, err error) {
	dir := filepath.Join(cfg.outDir, fmt.Sprintf("run-%d", n))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tb := newRunTB(dir)
	defer tb.runCleanups()
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
	}()

	res = &SizeResult{Services: n, EndpointsPerService: endpointsPerService, Started: time.Now().UTC(),
		Command: cfg.command, Machine: machine(), ChurnRate: cfg.churnRate, ChurnSeconds: cfg.churnFor.Seconds(),
		BurstUpdates: cfg.burst, NewServices: cfg.newServices, ServiceRate: cfg.serviceRate,
		KpngCommit: cfg.kpngVersion, Versions: cfg.versions, ProbeSeconds: cfg.probeFor.Seconds(),
		IptablesVariant: cfg.iptablesVariant, StartTimeout: cfg.startTimeout.String(), DrainTimeout: cfg.drainTimeout.String(),
		ProbeRounds: probeRoundsFor(cfg.probeFor), EBPFOnly: cfg.ebpfOnly, Run: cfg.run, Note30k: cfg.note30k}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var loadMu sync.Mutex
	go sampleLoad(loadCtx, &loadMu, &res.LoadDuring)

	status.set(n, "starting etcd and kube-apiserver")
	api := apiserver.Start(tb, apiserver.WithAPIServerArgs("--bind-address=0.0.0.0"))
	kubeconfig, err := proxyKubeconfig(api, dir)
	if err != nil {
		return nil, err
	}
	if err := createNode(ctx, api.Client); err != nil {
		return nil, err
	}
	status.set(n, fmt.Sprintf("preloading %d services x %d endpoints", n, endpointsPerService))
	began := time.Now()
	cl, err := preload(ctx, api.Client, n, func(done int) {
		status.set(n, fmt.Sprintf("preloading: %d/%d services", done, n))
	})
	if err != nil {
		return nil, err
	}
	res.PreloadSeconds = time.Since(began).Seconds()
	logf("size %d: preloaded in %.1fs", n, res.PreloadSeconds)

	svc, err := api.Client.CoreV1().Services(namespace).Get(ctx, probeService, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	probeVIP := net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(servicePort))

	// One namespace per proxy, plus a pod namespace behind it.
	var proxies []*proxy
	for i, k := range cfg.kinds() {
		p := &proxy{kind: k, index: i,
			ns:      fmt.Sprintf("%s%s-%d-p%d", nsPrefix, cfg.runID, n, i),
			podNS:   fmt.Sprintf("%s%s-%d-p%dpod", nsPrefix, cfg.runID, n, i),
			addr:    fmt.Sprintf("10.210.0.%d", proxyAddrBase+i),
			logPath: filepath.Join(dir, k.Name+".log"),
		}
		p.metrics = net.JoinHostPort(p.addr, metricsPort(i))
		tb.Cleanup(func() {
			_ = netnstest.Delete(p.podNS)
			_ = netnstest.Delete(p.ns)
		})
		if err := plumb(p, i); err != nil {
			return nil, err
		}
		if k.ebpf {
			if p.ebpf, err = newEBPFNode(tb, "bench"); err != nil {
				return nil, fmt.Errorf("%s: %w", k.Name, err)
			}
		}
		l, err := servePod(p.podNS)
		if err != nil {
			return nil, err
		}
		tb.Cleanup(func() { l.Close() })
		proxies = append(proxies, p)
		res.Proxies = append(res.Proxies, &ProxyResult{Name: k.Name, Reference: k.Reference, Phases: map[string]*PhaseResult{}})
	}

	// The proxies run in groups, one group after the other against the
	// same API server and cluster: each kpng backend beside kube-proxy in
	// the same mode, not every proxy on the same cores at once.
	groups := groupProxies(proxies, cfg.together)
	for _, g := range groups {
		res.Groups = append(res.Groups, names(g))
	}
	for _, g := range groups {
		if err := runGroup(ctx, cfg, cl, g, res, kubeconfig, dir, probeVIP, tb); err != nil {
			return res, err
		}
	}

	stopLoad()
	loadMu.Lock()
	res.Machine.LoadEnd = loadAvg()
	res.Finished = time.Now().UTC()
	loadMu.Unlock()
	status.set(n, "done")
	return res, writeResult(cfg.outDir, res)
}

// runGroup runs the cold start, the workload phases, the dataplane probe
// and the final readings of one group of proxies, then stops them.
func runGroup(ctx context.Context, cfg *config, cl *cluster, proxies []*proxy, res *SizeResult,
	kubeconfig, dir, probeVIP string, tb *runTB) error {
	n := res.Services
	defer func() {
		for _, p := range proxies {
			p.stop()
		}
	}()
	// Cold start: the group at once.
	status.set(n, "cold start: "+groupNames(proxies))
	for _, p := range proxies {
		i := p.index
		argv := p.kind.argv(runArgs{bins: cfg.bins, kubeconfig: kubeconfig, metrics: p.metrics,
			healthz: net.JoinHostPort(p.addr, healthzPort(i)), iptablesVariant: cfg.iptablesVariant, ebpf: p.ebpf})
		env := proxyEnv(cfg.iptablesPath, filepath.Join(dir, p.kind.Name+".xtables.lock"))
		if p.ebpf != nil {
			if err := p.ebpf.check(); err != nil {
				return fmt.Errorf("%s: %w", p.kind.Name, err)
			}
			// After the proxy stops (cleanups run last first), and
			// before the BPF filesystem is unmounted.
			tb.Cleanup(func() { cleanupPins(argv) })
		}
		if err := p.start(argv, env); err != nil {
			return err
		}
		tb.Cleanup(p.stop)
	}
	stopProgress := progressColdStart(ctx, n, proxies)
	live := waitColdStart(ctx, cfg, proxies, res)
	stopProgress()
	if len(live) == 0 {
		return fmt.Errorf("%s: no proxy completed its first sync", groupNames(proxies))
	}
	// Let every proxy finish what the start queued (kube-proxy syncs
	// again once its Node informer reports) before measuring anything.
	status.set(n, "waiting for the proxies to go idle")
	time.Sleep(settle)
	drain(ctx, cfg, live, time.Time{}, time.Time{}, nil)

	if !cfg.ebpfOnly {
		for _, phase := range phases {
			var err error
			if live, err = runPhase(ctx, cfg, cl, phase, live, res); err != nil {
				return fmt.Errorf("phase %s: %w", phase, err)
			}
		}
	}
	if cfg.oneChanges > 0 {
		singleChanges(ctx, cfg, cl, live, res)
	}

	status.set(n, "dataplane probes")
	for _, p := range proxies {
		if !p.running() {
			continue
		}
		r := res.proxy(p.kind.Name)
		if err := probeProxy(p, r, []string{probeVIP, net.JoinHostPort(probePodIP, fmt.Sprint(endpointPort))}, cfg.probeFor); err != nil {
			r.Error = joinErr(r.Error, err.Error())
			continue
		}
		for _, pr := range r.Probes {
			logf("size %d: %s: dataplane to %s: %d connections, %.0f/s, TCP connect time p50 %.1fµs p99 %.1fµs (%d failures)",
				n, p.kind.Name, pr.Target, pr.Connections, pr.PerSecond, pr.P50Micros, pr.P99Micros, pr.Failures)
		}
		for _, name := range slices.Sorted(maps.Keys(r.BPFPrograms)) {
			if pr := r.BPFPrograms[name]; pr.Runs > 0 {
				logf("size %d: %s: during the probe, %s ran %d times, %.0f ns each (kernel statistics)", n, p.kind.Name, name, pr.Runs, pr.NsPerRun())
			}
		}
	}

	for _, p := range proxies {
		if p.ebpf == nil || !p.running() {
			continue
		}
		r := res.proxy(p.kind.Name)
		m, err := p.ebpf.mapsMemory()
		if err != nil {
			r.Error = joinErr(r.Error, fmt.Sprintf("BPF maps' memory: %v", err))
		}
		if len(m) > 0 {
			total, each := sumMemory(m)
			r.BPFMaps, r.BPFMapsMB = m, mb(total)
			logf("size %d: %s: BPF maps %.1f MiB (%s)", n, p.kind.Name, r.BPFMapsMB, each)
		}
	}

	for _, p := range proxies {
		u, err := p.usage()
		if err != nil {
			r := res.proxy(p.kind.Name)
			r.Error = joinErr(r.Error, err.Error())
			continue
		}
		r := res.proxy(p.kind.Name)
		r.RSSEndMB, r.PeakRSSMB = mb(u.RSSBytes), mb(u.PeakRSSBytes)
		// Taken after the RSS is read: serving it allocates.
		path := filepath.Join(dir, p.kind.Name+".heap.pprof")
		if err := p.heapProfile(ctx, path); err != nil {
			logf("size %d: %v", n, err)
		} else {
			logf("size %d: %s: heap profile in %s", n, p.kind.Name, path)
		}
	}

	// Where the rules are: the variant the iptables proxies really used.
	status.set(n, "checking where each proxy's rules are")
	for _, p := range proxies {
		r := res.proxy(p.kind.Name)
		legacy, tables, err := rulesWhere(p.ns)
		if err != nil {
			r.Error = joinErr(r.Error, err.Error())
			continue
		}
		r.LegacyNATRules, r.NftTables, r.RulesChecked = legacy, tables, true
		logf("size %d: %s: %d rules in the legacy nat table; nf_tables tables: %v", n, p.kind.Name, legacy, tables)
		if err := saveRules(p.ns, filepath.Join(dir, p.kind.Name), legacy > 0, len(tables) > 0); err != nil {
			r.Error = joinErr(r.Error, err.Error())
		}
	}

	// Each ruleset loaded again alone, with the group stopped: what the
	// kernel (and nft or iptables-restore) takes for it, without the
	// proxy's informers or anything else of the cold start.
	for _, p := range proxies {
		p.stop()
	}
	for _, p := range proxies {
		r := res.proxy(p.kind.Name)
		if !r.RulesChecked || (r.LegacyNATRules == 0 && len(r.NftTables) == 0) {
			continue // kpng-ebpf: no rules
		}
		status.set(n, "loading "+p.kind.Name+"'s ruleset alone")
		ns := fmt.Sprintf("%s%s-%d-reload", nsPrefix, cfg.runID, n)
		l, err := reloadRules(ns, filepath.Join(dir, p.kind.Name), r.LegacyNATRules > 0, len(r.NftTables) > 0)
		if err != nil {
			r.Error = joinErr(r.Error, err.Error())
			continue
		}
		r.Reload = l
		logf("size %d: %s: its ruleset loaded alone in %.1fs (%.1fs kernel, %.1fs user)", n, p.kind.Name, l.WallSeconds, l.SysSeconds, l.UserSeconds)
	}
	return nil
}

// groupProxies returns the proxies in the groups that run one after the
// other, in the order of proxyKinds: by kind.Group, or all in one group
// (together).
func groupProxies(proxies []*proxy, together bool) [][]*proxy {
	if together {
		return [][]*proxy{proxies}
	}
	var groups [][]*proxy
	at := map[string]int{}
	for _, p := range proxies {
		i, ok := at[p.kind.Group]
		if !ok {
			i = len(groups)
			at[p.kind.Group] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], p)
	}
	return groups
}

// names are the proxies' names, in order.
func names(ps []*proxy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.kind.Name)
	}
	return out
}

func groupNames(proxies []*proxy) string { return strings.Join(names(proxies), ", ") }

// splitProbe is how long kpng-ebpf's probe of each target alone runs,
// for its programs' time on that target's connections.
const splitProbe = 2 * time.Second

// targetKeys name the probe's targets in ProxyResult.BPFProgramsByTarget;
// connectsKey holds there the connections of that probe (as Runs).
var targetKeys = []string{"clusterip", "podip"}

const connectsKey = "connections"

// kinds are the proxies the run starts: all, or kpng-ebpf alone
// (--ebpf-only), of the groups --groups names if it names any.
func (cfg *config) kinds() []proxyKind {
	var out []proxyKind
	for _, k := range proxyKinds {
		if (!cfg.ebpfOnly || k.ebpf) && (len(cfg.groups) == 0 || slices.Contains(cfg.groups, k.Group)) {
			out = append(out, k)
		}
	}
	return out
}

// groupNamesKnown are the proxies' groups, for --groups.
func groupNamesKnown() []string {
	var out []string
	for _, k := range proxyKinds {
		if !slices.Contains(out, k.Group) {
			out = append(out, k.Group)
		}
	}
	return out
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// finite turns "no observation" (NaN) into 0, which JSON can carry and the
// report shows as missing.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// probeProxy runs the dataplane probe from p's node namespace to the
// targets, and records it in r. kpng-ebpf's client runs in the cgroup its
// programs attach to, and must be found there: a client elsewhere would
// measure a ClusterIP that nothing translates.
func probeProxy(p *proxy, r *ProxyResult, targets []string, d time.Duration) error {
	var cg *os.File
	want := ""
	if p.ebpf != nil {
		var err error
		if cg, err = p.ebpf.openCgroup(); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		defer cg.Close()
		rel, err := filepath.Rel(p.ebpf.root, p.ebpf.cgroup)
		if err != nil {
			return err
		}
		want = "/" + rel
	}
	var before map[string]ProgramRun
	if p.ebpf != nil {
		// The programs' own cost during the probe: what the Service
		// adds to a connect, without the noise of the connections around
		// it.
		stats, err := enableProgramStats()
		if err != nil {
			return fmt.Errorf("probe: BPF statistics: %w", err)
		}
		defer stats.Close()
		if before, err = p.ebpf.programRuns(); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
	}
	prs, err := probe(p.ns, cg, targets, d)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if p.ebpf != nil {
		after, err := p.ebpf.programRuns()
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		r.BPFPrograms = programRunsSince(before, after)
	}
	for _, pr := range prs {
		if want != "" && pr.Cgroup != want {
			return fmt.Errorf("probe: the client ran in cgroup %q, not %q", pr.Cgroup, want)
		}
	}
	r.Probes = prs
	if p.ebpf != nil {
		// The programs' time on each target's connections apart: the
		// ClusterIP's (connect4 finds the Service and rewrites) against
		// the pod IP's (it finds nothing), one short probe of each.
		r.BPFProgramsByTarget = map[string]map[string]ProgramRun{}
		for i, t := range targets {
			before, err := p.ebpf.programRuns()
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			one, err := probe(p.ns, cg, []string{t}, splitProbe)
			if err != nil {
				return fmt.Errorf("probe of %s alone: %w", t, err)
			}
			if want != "" && one[0].Cgroup != want {
				return fmt.Errorf("probe of %s alone: the client ran in cgroup %q, not %q", t, one[0].Cgroup, want)
			}
			after, err := p.ebpf.programRuns()
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			runs := programRunsSince(before, after)
			runs[connectsKey] = ProgramRun{Runs: uint64(one[0].Connections)}
			r.BPFProgramsByTarget[targetKeys[i]] = runs
		}
	}
	return nil
}

// plumb builds proxy i's namespace: a veth to the bench bridge (its way to
// the API server, and ours to its /metrics), and a pod namespace behind a
// second veth, whose address is the probe Service's endpoint. The route to
// the service range goes to the pod side, so that a connection to a
// cluster IP has a route before the proxy's NAT rules rewrite it.
func plumb(p *proxy, i int) error {
	for _, ns := range []string{p.ns, p.podNS} {
		if _, err := netnstest.Create(ns); err != nil {
			return err
		}
	}
	veth := fmt.Sprintf("kpbv%d", i)
	if err := ipCmd("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", p.ns); err != nil {
		return err
	}
	if err := ipCmd("link", "set", veth, "master", benchBridge, "up"); err != nil {
		return err
	}
	if err := (&netnstest.Netns{Name: p.ns}).IPBatch(
		fmt.Sprintf("addr add %s/%d dev eth0", p.addr, bridgePrefix),
		"link set eth0 up",
		"link add pod0 type veth peer name eth0 netns "+p.podNS,
		"addr add "+probeNodeIP+"/24 dev pod0",
		"link set pod0 up",
		"route add "+apiserver.ServiceCIDRIPv4+" via "+probePodIP,
	); err != nil {
		return err
	}
	return (&netnstest.Netns{Name: p.podNS}).IPBatch(
		"addr add "+probePodIP+"/24 dev eth0",
		"link set eth0 up",
		"route add default via "+probeNodeIP,
	)
}

// setupBridge creates the bench bridge in the bench's namespace.
func setupBridge() error {
	if err := ipCmd("link", "add", benchBridge, "type", "bridge"); err != nil {
		return err
	}
	if err := ipCmd("addr", "add", fmt.Sprintf("%s/%d", bridgeAddr, bridgePrefix), "dev", benchBridge); err != nil {
		return err
	}
	return ipCmd("link", "set", benchBridge, "up")
}

// proxyKubeconfig writes a kubeconfig for the proxies: the admin's, with
// the API server reached over the bench bridge. The serving certificate is
// for 127.0.0.1, which tls-server-name asks to check instead.
func proxyKubeconfig(api *apiserver.Server, dir string) (string, error) {
	kc, err := clientcmd.LoadFromFile(api.KubeconfigPath)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(api.URL)
	if err != nil {
		return "", err
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + net.JoinHostPort(bridgeAddr, u.Port())
		c.TLSServerName = "127.0.0.1"
	}
	path := filepath.Join(dir, "proxy.kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// waitColdStart waits until every proxy completed its first sync, exited,
// or failed to sync within cfg.startTimeout of the start (all were started
// together), records the cold-start figures, and returns the proxies that
// are up. A proxy that did not sync in time is stopped, so that it no
// longer takes CPU from the others.
func waitColdStart(ctx context.Context, cfg *config, proxies []*proxy, res *SizeResult) []*proxy {
	// One deadline for all: once it has passed, every proxy not yet
	// synced is reported at once, however many there are.
	wait, cancel := context.WithTimeout(ctx, cfg.startTimeout)
	defer cancel()
	var live []*proxy
	for _, p := range proxies {
		r := res.proxy(p.kind.Name)
		if err := p.waitFirstSync(wait); err != nil {
			switch {
			case ctx.Err() != nil:
				r.Error = joinErr(r.Error, ctx.Err().Error())
			case errors.Is(err, context.DeadlineExceeded):
				r.NoSyncWithin = cfg.startTimeout.String()
				r.Error = joinErr(r.Error, fmt.Sprintf("did not sync within %v (log: %s)", cfg.startTimeout, p.logPath))
				p.stop()
			default:
				r.Error = joinErr(r.Error, err.Error())
			}
			logf("size %d: %s: %s", res.Services, p.kind.Name, r.Error)
			continue
		}
		r.FirstSyncSeconds = p.firstSyncAfter().Seconds()
		if u, err := p.usageAtFirstSync(); err != nil {
			r.Error = joinErr(r.Error, fmt.Sprintf("usage at the first sync: %v", err))
		} else {
			r.ColdStartCPUSeconds = u.CPUSeconds
			r.ColdStartSysCPUSeconds = u.SysSeconds
			r.ColdStartChildSysCPUSeconds = u.ChildSysSeconds
			r.RSSAfterStartMB = mb(u.RSSBytes)
		}
		listed, took := p.coldStartSplit()
		r.ListedSeconds, r.FirstSyncTookSeconds = listed.Seconds(), took.Seconds()
		logf("size %d: %s first complete sync after %.1fs (listed after %.1fs, the sync took %.1fs; %.1fs of CPU, %.1fs of it the kernel's; %.0f MB RSS)",
			res.Services, p.kind.Name, r.FirstSyncSeconds, r.ListedSeconds, r.FirstSyncTookSeconds,
			r.ColdStartCPUSeconds, r.ColdStartSysCPUSeconds, r.RSSAfterStartMB)
		live = append(live, p)
	}
	return live
}

// snapshot is a proxy's metrics and usage at one moment.
type snapshot struct {
	m     Metrics
	u     ProcUsage
	taken time.Time
}

func takeSnapshot(ctx context.Context, p *proxy) (snapshot, error) {
	u, err := p.usage()
	if err != nil {
		return snapshot{}, err
	}
	m, err := p.scrape(ctx)
	return snapshot{m: m, u: u, taken: time.Now()}, err
}

var ipv4 = map[string]string{labelFamily: familyIPv4}

// runPhase runs one workload, records each proxy's figures for it, and
// returns the proxies that caught up: one that did not within
// cfg.drainTimeout is left running (its rules are still probed at the
// end), but out of the later phases, whose figures it would spoil.
func runPhase(ctx context.Context, cfg *config, cl *cluster, phase string, live []*proxy, res *SizeResult) ([]*proxy, error) {
	if !inTurns(cfg, phase, live) {
		return runPhaseOf(ctx, cfg, cl, phase, live, res)
	}
	// One turn per proxy, the others stopped (SIGSTOP) meanwhile: the
	// proxy measured has the cores to itself, beside the API server.
	// Then the others catch up on what they missed, unmeasured, before
	// their own turn.
	if !slices.Contains(res.InTurns, phase) {
		res.InTurns = append(res.InTurns, phase)
	}
	kept := map[*proxy]bool{}
	for _, p := range live {
		var next []*proxy
		var err error
		turnOf(ctx, cfg, live, p, phase, res, func() {
			next, err = runPhaseOf(ctx, cfg, cl, phase, []*proxy{p}, res)
		})
		if err != nil {
			return live, err
		}
		for _, q := range next {
			kept[q] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(live), func(p *proxy) bool { return !kept[p] }), nil
}

// turnOf runs measure with the proxies of live other than p stopped
// (SIGSTOP), so that p has the cores to itself beside the API server; then
// the others catch up on what they missed, unmeasured. One that does not
// within cfg.drainTimeout has it said beside its figures: its own turn
// (or the next phase) would be charged the backlog.
func turnOf(ctx context.Context, cfg *config, live []*proxy, p *proxy, what string, res *SizeResult, measure func()) {
	others := slices.DeleteFunc(slices.Clone(live), func(o *proxy) bool { return o == p })
	pause(others, true)
	measure()
	pause(others, false)
	if len(others) == 0 {
		return
	}
	status.set(res.Services, fmt.Sprintf("%s: the proxies stopped during %s's turn catch up", what, p.kind.Name))
	resumed := time.Now()
	for i, c := range drain(ctx, cfg, others, resumed, resumed, nil) {
		if o := others[i]; c.at.IsZero() && o.running() {
			r := res.proxy(o.kind.Name)
			r.Error = joinErr(r.Error, fmt.Sprintf("did not catch up within %v after being stopped during %s's %s turn",
				cfg.drainTimeout, p.kind.Name, what))
		}
	}
}

// singleChanges makes cfg.oneChanges single endpoint changes for each
// kpng proxy of live in its turn (turnOf, as the churn's), and records
// what each sync that applied one of them took: issue 20's one-endpoint
// change, sync work (and issue 21's, with --ebpf-only). Kube-proxy logs no
// such line.
func singleChanges(ctx context.Context, cfg *config, cl *cluster, live []*proxy, res *SizeResult) {
	n := res.Services
	res.OneChanges, res.OneChangeRate = cfg.oneChanges, cfg.oneChangeRate
	for _, p := range live {
		if p.kind.Reference == "" {
			continue
		}
		k, rate := singlePacing(cfg.oneChanges, cfg.oneChangeRate, p.kind.minSync)
		status.set(n, fmt.Sprintf("%s: single endpoint changes: %d, %s/s", p.kind.Name, k, f2(rate)))
		var oc *OneChangeResult
		var err error
		turnOf(ctx, cfg, live, p, "single changes", res, func() {
			oc, err = oneChanges(ctx, cfg, cl, p, k, rate)
		})
		r := res.proxy(p.kind.Name)
		if err != nil {
			r.Error = joinErr(r.Error, fmt.Sprintf("single endpoint changes: %v", err))
			continue
		}
		r.OneChange = oc
		logf("size %d: %s: %d syncs of one changed Service (of %d changes): took p50 %.3f ms, p99 %.3f ms, mean %.3f ms, max %.3f ms (load %.1f)",
			n, p.kind.Name, oc.Syncs, oc.Changes, oc.P50Ms, oc.P99Ms, oc.MeanMs, oc.MaxMs, oc.LoadDuring)
	}
}

// inTurns reports whether phase runs once per proxy of the group, the
// others stopped: the churn and the burst (which can be repeated: they
// update existing slices), for a group of more than one proxy, unless
// --together.
func inTurns(cfg *config, phase string, live []*proxy) bool {
	return !cfg.together && len(live) > 1 && (phase == phaseChurn || phase == phaseBurst)
}

// pause stops (SIGSTOP) or resumes (SIGCONT) the running proxies of ps.
func pause(ps []*proxy, stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	for _, p := range ps {
		if p.running() && p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(sig)
		}
	}
}

// runPhaseOf runs phase once, with every proxy of live running, and
// measures each of them.
func runPhaseOf(ctx context.Context, cfg *config, cl *cluster, phase string, live []*proxy, res *SizeResult) ([]*proxy, error) {
	n := res.Services
	before := map[*proxy]snapshot{}
	for _, p := range live {
		s, err := takeSnapshot(ctx, p)
		if err != nil {
			return live, err
		}
		before[p] = s
	}
	start := time.Now()
	var changes int
	var err error
	switch phase {
	case phaseChurn:
		status.set(n, fmt.Sprintf("churn: %.0f updates/s for %v", cfg.churnRate, cfg.churnFor))
		profiled := profileCPU(ctx, cfg, n, live, phase)
		changes, err = cl.churn(ctx, cfg.churnRate, cfg.churnFor)
		profiled()
	case phaseBurst:
		status.set(n, fmt.Sprintf("burst: %d updates at once", cfg.burst))
		changes, err = cfg.burst, cl.burst(ctx, cfg.burst)
	case phaseCreate:
		status.set(n, fmt.Sprintf("creating %d services", cfg.newServices))
		changes, err = cfg.newServices, cl.createServices(ctx, cfg.newServices, cfg.serviceRate)
	case phaseDelete:
		status.set(n, fmt.Sprintf("deleting %d services", cfg.newServices))
		changes, err = cfg.newServices, cl.deleteServices(ctx, cfg.newServices, cfg.serviceRate)
	}
	if err != nil {
		return live, err
	}
	// A proxy may apply the last change before its write returns to the
	// bench: a sync that ended after the last write began counts.
	lastWrite, wrote := cl.lastWriteStart(), time.Now()
	if lastWrite.IsZero() {
		lastWrite = wrote
	}
	status.set(n, phase+": waiting for the proxies to catch up")
	caught := drain(ctx, cfg, live, lastWrite, wrote, func(p *proxy, at time.Time) {
		status.set(n, fmt.Sprintf("%s: %s caught up after %.1fs", phase, p.kind.Name, at.Sub(start).Seconds()))
	})
	var next []*proxy
	for i, p := range live {
		r := res.proxy(p.kind.Name)
		switch {
		case !p.running():
			r.Error = joinErr(r.Error, fmt.Sprintf("exited during the %s: %v (log: %s)", phase, p.exitErr, p.logPath))
			continue
		case caught[i].at.IsZero():
			r.Error = joinErr(r.Error, fmt.Sprintf("did not catch up after the %s within %v: left out of the later phases",
				phase, cfg.drainTimeout))
		default:
			next = append(next, p)
		}
		// The figures of a proxy that caught up are read when it did,
		// not when the slowest one did.
		after := caught[i].snap
		if after == nil {
			s, err := takeSnapshot(ctx, p)
			if err != nil {
				r.Error = joinErr(r.Error, fmt.Sprintf("%s: %v", phase, err))
				continue
			}
			after = &s
		}
		b := before[p]
		sync, _ := after.m.Histogram(metricSyncDuration, ipv4)
		sync = sync.Sub(mustHistogram(b.m, metricSyncDuration, ipv4))
		np, _ := after.m.Histogram(metricNetProg, ipv4)
		np = np.Sub(mustHistogram(b.m, metricNetProg, ipv4))
		partial, _ := after.m.Histogram(metricPartialSync, ipv4)
		partial = partial.Sub(mustHistogram(b.m, metricPartialSync, ipv4))
		pr := &PhaseResult{
			Changes: changes,
			Syncs:   sync.Count, SyncP50: finite(sync.Quantile(0.5)), SyncP99: finite(sync.Quantile(0.99)), SyncSumSeconds: sync.Sum,
			PartialSyncs: partial.Count, PartialSyncSumSeconds: partial.Sum,
			NetProgCount: np.Count, NetProgP50: finite(np.Quantile(0.5)), NetProgP99: finite(np.Quantile(0.99)),
			NetProgP99Bucket: finite(np.BucketAbove(0.99)),
			CPUSeconds:       after.u.CPUSeconds - b.u.CPUSeconds,
			WallSeconds:      after.taken.Sub(start).Seconds(),
		}
		if at := caught[i].at; !at.IsZero() {
			pr.CaughtUp = true
			pr.CaughtUpSeconds = at.Sub(start).Seconds()
		}
		r.Phases[phase] = pr
		logf("size %d: %s: %s: syncs %.0f (p50 %s, p99 %s), network programming p50 %s p99 %s, cpu %.2fs, caught up %v after %.1fs",
			n, phase, p.kind.Name, pr.Syncs, secs(pr.SyncP50), secs(pr.SyncP99), secs(pr.NetProgP50), secs(pr.NetProgP99),
			pr.CPUSeconds, pr.CaughtUp, pr.CaughtUpSeconds)
	}
	return next, nil
}

// profileCPU starts, with cfg.cpuProfiles, a CPU profile of each proxy of
// live over the next cfg.churnFor, written beside the size's results as
// <proxy>.<phase>.cpu.pprof; the function it returns waits for them.
func profileCPU(ctx context.Context, cfg *config, n int, live []*proxy, phase string) (wait func()) {
	if !cfg.cpuProfiles {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, p := range live {
		path := filepath.Join(cfg.outDir, fmt.Sprintf("run-%d", n), p.kind.Name+"."+phase+".cpu.pprof")
		wg.Go(func() {
			if err := p.cpuProfile(ctx, cfg.churnFor, path); err != nil {
				logf("size %d: %v", n, err)
				return
			}
			logf("size %d: %s: CPU profile of the %s in %s", n, p.kind.Name, phase, path)
		})
	}
	return wg.Wait
}

func mustHistogram(m Metrics, name string, want map[string]string) Histogram {
	h, _ := m.Histogram(name, want)
	return h
}

func secs(v float64) string { return fmt.Sprintf("%.3fs", v) }

// catchUp is when a proxy applied a phase's last change (zero if it did
// not within the drain timeout), and its figures read at that point (nil
// if they could not be).
type catchUp struct {
	at   time.Time
	snap *snapshot
}

// drain waits until every proxy has applied every change written up to
// the last write, which began at since and returned by settleFrom: no
// change pending, and a sync that ended after since (a watch event takes
// milliseconds, so `settle` after settleFrom a change not yet pending is
// not coming). It returns, per proxy, the end of that sync and the
// proxy's figures when that was seen, and calls onCaught as each one
// catches up, for at most cfg.drainTimeout.
func drain(ctx context.Context, cfg *config, live []*proxy, since, settleFrom time.Time, onCaught func(*proxy, time.Time)) []catchUp {
	caught := make([]catchUp, len(live))
	deadline := time.Now().Add(cfg.drainTimeout)
	if wait := time.Until(settleFrom.Add(settle)); wait > 0 {
		time.Sleep(wait)
	}
	for {
		left := 0
		for i, p := range live {
			if !caught[i].at.IsZero() || !p.running() {
				continue
			}
			m, err := p.scrape(ctx)
			if err != nil {
				left++
				continue
			}
			pending, _ := m.Value(metricEndpointsPend, nil)
			svcPending, _ := m.Value(metricServicesPend, nil)
			last, _ := m.Value(metricLastSync, ipv4)
			lastSync := time.Unix(0, int64(last*1e9))
			if pending == 0 && svcPending == 0 && !lastSync.Before(since) {
				caught[i].at = lastSync
				if u, err := p.usage(); err == nil {
					caught[i].snap = &snapshot{m: m, u: u, taken: time.Now()}
				}
				if onCaught != nil {
					onCaught(p, lastSync)
				}
				continue
			}
			left++
		}
		if left == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return caught
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// progressColdStart prints which proxies have synced, until stopped.
func progressColdStart(ctx context.Context, n int, proxies []*proxy) func() {
	ctx, cancel := context.WithCancel(ctx)
	begin := time.Now()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var parts []string
			for _, p := range proxies {
				switch d := p.firstSyncAfter(); {
				case d > 0:
					parts = append(parts, fmt.Sprintf("%s synced in %.1fs", p.kind.Name, d.Seconds()))
				case !p.running():
					parts = append(parts, p.kind.Name+" exited")
				default:
					parts = append(parts, p.kind.Name+" syncing")
				}
			}
			status.set(n, fmt.Sprintf("cold start: %.0fs: %s", time.Since(begin).Seconds(), strings.Join(parts, ", ")))
		}
	}()
	return cancel
}
