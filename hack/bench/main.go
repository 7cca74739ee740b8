// Command bench runs kpng and upstream kube-proxy side by side against one
// real API server, at several cluster sizes, and writes BENCHMARKS.md.
//
// For each size N it starts etcd and kube-apiserver (test/integration/apiserver)
// inside a network namespace of its own, creates a Node, preloads N Services
// of 10 endpoints each (EndpointSlices created directly), then runs the
// proxies, each in its own network namespace (so their tables never meet,
// and nothing touches the host's firewall) and on its own metrics port, in
// groups one after the other (each kpng backend beside kube-proxy in its
// mode; --together: all at once):
//
//   - kpng with the nft backend (kpng kube ... to-local ... to-nft),
//   - kpng with the iptables backend (... to-iptables),
//   - kube-proxy in nftables mode, and in iptables mode (the binary built
//     by hack/install-test-deps.sh, the API server's version),
//   - kpng with the eBPF backend (... to-ebpf), its socket programs on a
//     cgroup v2 of its node that the bench creates (a child of the
//     hierarchy's root, mounted on a private folder: never the root), its
//     pins on a BPF filesystem of the bench's (ebpf.go).
//
// For each group, it measures the cold start (time to the first complete
// sync, split into the API lists and the first sync by the proxies' logs), then runs
// the workloads: churn (EndpointSlice updates at a fixed rate, each with
// endpoints.kubernetes.io/last-change-trigger-time), a burst of updates at
// once, and service creation and deletion. Figures come from the same
// metric names for every proxy (kube-proxy's), and from /proc. Last, a
// dataplane probe opens TCP connections from each proxy's node to a
// ClusterIP whose endpoint is a pod namespace behind that node, and to the
// pod's IP, alternately; its client is a process of its own, started in
// kpng-ebpf's cgroup for kpng-ebpf. kpng-ebpf's maps' memory is the
// kernel's accounting of each pinned map.
//
// With --ebpf-only, kpng-ebpf runs alone (report_ebpf.go, issue 21's
// figures): no workload phases; single endpoint changes, one at a time,
// each sync's own time read from kpng's log; a longer probe, with the
// kernel's run-time statistics of each of its programs read around it;
// the maps' memory. Its results go to <out>/ebpf, and it writes only
// BENCHMARKS.md's kpng-ebpf section.
//
// After the sizes, with no proxy and no API server left running, it runs
// the fan-out (fanout.go): hack/bench-fanout, one kpng brain serving the
// cluster to --fanout-agents node agents over gRPC, at the largest size
// run up to 10,000 services (issue 20's "one brain to 1,000 agents").
//
// The default sizes take 30,000 services too where the machine allows
// (--with-30k=auto, size30k.go): decided once 10,000 ran, from the memory
// available and the 10,000 run's time against --budget-30k.
//
// Results go to <out>/results-N.json and <out>/fanout.json; the report
// (alone with --report-only) turns all of them into BENCHMARKS.md and the
// plots under docs/bench, in the repository or in --report-dir. Run it as
// root with hack/bench.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// envChild marks the bench process that runs inside the bench namespace;
// its value is the run id.
const envChild = "KPNG_BENCH_RUN"

func main() {
	// The dataplane probe's client: the bench itself, run by the bench
	// inside a proxy's namespace (and cgroup).
	if len(os.Args) > 1 && os.Args[1] == probeCommand {
		os.Exit(runProbeClient(os.Args[2:]))
	}
	var (
		sizes     = flag.String("sizes", "100,1000,5000,10000", "comma-separated numbers of services (each with 10 endpoints); the dataplane comparison is between the smallest and the largest")
		budget30k = flag.Duration("budget-30k", 2*time.Hour, fmt.Sprintf("with --with-30k=auto: the longest a 30,000-service run may be "+
			"expected to take (projected as %d x the 10,000 run's time)", growth30k))
		churnRate = flag.Float64("churn-rate", 100, "EndpointSlice updates per second during the churn (issue 20 states its targets at 100/s)")
		churnFor  = flag.Duration("churn", time.Minute, "how long the churn lasts")
		burst     = flag.Int("burst", 1000, "updates made at once in the burst")
		newSvcs   = flag.Int("new-services", 50, "services created, then deleted")
		svcRate   = flag.Float64("service-rate", 5, "services created (or deleted) per second")
		startTO   = flag.Duration("start-timeout", 10*time.Minute, "longest wait for a proxy's first complete sync; a proxy that takes longer is reported so, and stopped")
		drainTO   = flag.Duration("drain-timeout", 5*time.Minute, "longest wait for a proxy to catch up after a phase; a proxy that takes longer is reported so, and left out of the later phases")
		variant   = flag.String("iptables-variant", "legacy", "the iptables variant of both iptables proxies: legacy, or nft (whose iptables-nft-restore takes many minutes from 5,000 services)")
		together  = flag.Bool("together", false, "run every proxy at once, as the bench did before 2026-11-28, instead of each kpng backend beside kube-proxy in its mode, one mode after the other")
		groups    = flag.String("groups", "", "comma-separated groups of proxies to run, of "+strings.Join(groupNamesKnown(), ", ")+
			" (default: all); for a trial: the report leaves the others' columns empty")
		probeFor  = flag.Duration("probe", 3*time.Second, "how long each dataplane probe runs")
		outDir    = flag.String("out", "", "where results and logs go (default: <repo>/.cache/bench)")
		kpngBin   = flag.String("kpng", "", "kpng binary (default: built from the repository)")
		kubeProxy = flag.String("kube-proxy", "", "kube-proxy binary (default: <repo>/.cache/bin/kube-proxy)")
		reportDir = flag.String("report-dir", "", "where BENCHMARKS.md and docs/bench/*.png are written (default: the repository root); "+
			"a directory without a BENCHMARKS.md starts from the repository's, so a trial run can leave the committed page alone")
		reportOnly = flag.Bool("report-only", false, "only write BENCHMARKS.md and the plots from the results in --out (results-N.json, fanout.json)")
		guideOnly  = flag.Bool("guide-only", false, "only write BENCHMARKS.md's generated guide to kpng-ebpf's figures, leaving the results alone")
		noReport   = flag.Bool("no-report", false, "do not write BENCHMARKS.md and the plots")
		ebpfOnly   = flag.Bool("ebpf-only", false, "run kpng-ebpf alone, for issue 21's figures: no workload phases, a longer probe (15 s unless --probe is given), "+
			"single endpoint changes (--one-changes), results in <out>/ebpf, and only BENCHMARKS.md's kpng-ebpf section written (with --report-only too)")
		oneChanges = flag.Int("one-changes", 60, "single endpoint changes made for each kpng proxy, one at a time, the others stopped (issue 20's and 21's one-change sync work); 0: none")
		oneRate    = flag.Float64("one-change-rate", 5, "single endpoint changes per second (--one-changes)")
		cpuProf    = flag.Bool("cpu-profiles", false, "take each proxy's CPU profile over its churn, into <out>/run-N/<proxy>.churn.cpu.pprof")
		foAgents   = flag.Int("fanout-agents", fanoutTargetAgents, "node agents of the fan-out (hack/bench-fanout, after the sizes; not with --ebpf-only), each on its own gRPC connection; 0: no fan-out")
		foServices = flag.Int("fanout-services", 0, "Services of the fan-out (default: the largest size run, at most 10,000)")
		foChanges  = flag.Int("fanout-changes", 100, "EndpointSlice changes the fan-out measures, one at a time")
	)
	w30 := with30k("auto")
	flag.Var(&w30, "with-30k", fmt.Sprintf("30,000 services as well: true (--with-30k alone), false, or auto: with the default sizes, "+
		"after 10,000, if %d GiB of memory are available and %d x the 10,000 run's time fits in --budget-30k (long: kube-proxy's "+
		"iptables mode needs many minutes to start)", min30kMemory>>30, growth30k))
	flag.Usage = usage
	flag.Parse()
	probeGiven, sizesGiven := false, false
	flag.Visit(func(f *flag.Flag) {
		probeGiven = probeGiven || f.Name == "probe"
		sizesGiven = sizesGiven || f.Name == "sizes"
	})
	if *ebpfOnly && !probeGiven {
		*probeFor = 15 * time.Second
	}

	root, err := repoRoot()
	if err != nil {
		fatal(err)
	}
	if *outDir == "" {
		*outDir = filepath.Join(root, ".cache", "bench")
		if *ebpfOnly {
			*outDir = filepath.Join(*outDir, "ebpf")
		}
	}
	// The binaries are built elsewhere (buildAtHead), and the child runs
	// in the same folder: one absolute path for all.
	if *outDir, err = filepath.Abs(*outDir); err != nil {
		fatal(err)
	}
	writeReport := report
	if *ebpfOnly {
		writeReport = ebpfReport
	}
	if *reportDir == "" {
		*reportDir = root
	}
	if *reportOnly {
		if err := writeReport(root, *reportDir, *outDir); err != nil {
			fatal(err)
		}
		return
	}
	if *guideOnly {
		if err := guide(root, *reportDir); err != nil {
			fatal(err)
		}
		return
	}
	if os.Geteuid() != 0 {
		fatal(fmt.Errorf("the bench creates network namespaces and needs root (hack/bench.sh)"))
	}

	// The parent only builds the namespace the bench runs in, runs itself
	// there, and removes every namespace of the run afterwards, however
	// the child ended.
	if os.Getenv(envChild) == "" {
		os.Exit(runParent(root, *outDir, *reportDir, *noReport, writeReport))
	}

	if *variant != "legacy" && *variant != "nft" {
		fatal(fmt.Errorf("--iptables-variant %q: legacy or nft", *variant))
	}
	if *foAgents < 0 || *foServices < 0 || *foChanges < 1 {
		fatal(fmt.Errorf("--fanout-agents and --fanout-services: 0 or more; --fanout-changes: 1 or more"))
	}
	cfg := &config{churnRate: *churnRate, churnFor: *churnFor, burst: *burst, newServices: *newSvcs,
		serviceRate: *svcRate, startTimeout: *startTO, drainTimeout: *drainTO, probeFor: *probeFor,
		ebpfOnly: *ebpfOnly, oneChanges: *oneChanges, oneChangeRate: *oneRate, cpuProfiles: *cpuProf,
		iptablesVariant: *variant, together: *together, fanoutServices: *foServices, fanoutChanges: *foChanges,
		outDir: *outDir, runID: os.Getenv(envChild), command: "hack/bench.sh " + strings.Join(os.Args[1:], " ")}
	if *groups != "" {
		for _, g := range strings.Split(*groups, ",") {
			if !slices.Contains(groupNamesKnown(), g) {
				fatal(fmt.Errorf("--groups: no group %q (groups: %s)", g, strings.Join(groupNamesKnown(), ", ")))
			}
			cfg.groups = append(cfg.groups, g)
		}
	}
	cfg.run = time.Now().UTC().Format("20060102T150405Z") + "-" + cfg.runID
	if !cfg.ebpfOnly {
		cfg.fanoutAgents = *foAgents
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fatal(fmt.Errorf("--sizes: %q is not a number of services", s))
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	add30k, auto30k := false, false
	if !cfg.ebpfOnly {
		add30k, auto30k, cfg.note30k = plan30k(w30, sizesGiven, cfg.sizes)
	} else if w30 == "true" {
		add30k = true
	}
	if add30k {
		cfg.sizes = append(cfg.sizes, size30k)
	}
	if cfg.bins.kubeProxy = *kubeProxy; cfg.bins.kubeProxy == "" {
		cfg.bins.kubeProxy = filepath.Join(root, ".cache", "bin", "kube-proxy")
	}
	var pkgs []string
	if cfg.bins.kpng = *kpngBin; cfg.bins.kpng == "" {
		pkgs = append(pkgs, "./cmd/kpng")
		cfg.bins.kpng = filepath.Join(*outDir, "kpng")
	} else {
		cfg.kpngVersion = "given: " + cfg.bins.kpng
	}
	if cfg.fanoutAgents > 0 {
		pkgs = append(pkgs, "./hack/bench-fanout")
		cfg.bins.benchFanout = filepath.Join(*outDir, "bench-fanout")
	}
	if len(pkgs) > 0 {
		status.set(0, "building "+strings.Join(pkgs, " and ")+" from the last commit")
		if cfg.headCommit, err = buildAtHead(root, *outDir, pkgs...); err != nil {
			fatal(err)
		}
		if *kpngBin == "" {
			cfg.kpngVersion = cfg.headCommit
		}
	}
	for _, b := range []string{cfg.bins.kpng, cfg.bins.kubeProxy} {
		if _, err := os.Stat(b); err != nil && (b == cfg.bins.kpng || !cfg.ebpfOnly) {
			fatal(fmt.Errorf("%v (run hack/install-test-deps.sh)", err))
		}
	}
	if cfg.iptablesPath, err = iptablesPathDir(cfg.outDir, cfg.iptablesVariant); err != nil {
		fatal(err)
	}
	cfg.versions = Versions{
		KubeProxy:     binaryVersion(cfg.bins.kubeProxy),
		KubeAPIServer: binaryVersion(apiServerBinary(root)),
		Iptables:      binaryVersion(filepath.Join(cfg.iptablesPath, "iptables")),
		Nft:           binaryVersion("nft"),
	}
	if err := setupBridge(); err != nil {
		fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed := false
	// cfg.sizes grows by 30,000 after 10,000 if the rule says so.
	for i := 0; i < len(cfg.sizes); i++ {
		n := cfg.sizes[i]
		began := time.Now()
		res, err := runSize(ctx, cfg, n)
		status.done()
		if err != nil {
			logf("size %d: %v", n, err)
			failed = true
			if res != nil {
				_ = writeResult(cfg.outDir, res)
			}
		}
		if ctx.Err() != nil {
			break
		}
		if auto30k && n == targetServices {
			var run bool
			var note string
			if mem, merr := memAvailable(); merr != nil {
				note = fmt.Sprintf("30,000 services were not run: the memory available is unknown (%v)", merr)
			} else {
				run, note = decide30k(mem, time.Since(began), *budget30k, err != nil)
			}
			logf("%s", note)
			cfg.note30k = note
			if res != nil {
				res.Note30k = note
				if err := writeResult(cfg.outDir, res); err != nil {
					logf("size %d: %v", n, err)
				}
			}
			if run {
				cfg.sizes = append(cfg.sizes, size30k)
			}
		}
	}
	if cfg.fanoutAgents > 0 && ctx.Err() == nil {
		services := fanoutServices(cfg.sizes, cfg.fanoutServices)
		fo, err := runFanout(ctx, cfg, services)
		status.done()
		if err != nil {
			logf("fan-out: %v", err)
			failed = true
		} else {
			f := fo.Figures
			logf("fan-out: %d agents, %d services, %d changes: a change to all agents p50 %.1f ms, p99 %.1f ms, max %.1f ms "+
				"(goal: p99 under %d ms); brain memory per agent %.0f KiB (RSS %.0f MiB with every agent synced, %.0f MiB before any, over %d agents)",
				f.Agents, f.Services, f.Changes, f.allAgents(0.5), f.allAgents(0.99), f.allAgents(1), fanoutGoalMs,
				f.brainBytesPerAgent()/1024, mb(f.BrainRSSSyncedBytes), mb(f.BrainRSSIdleBytes), f.Agents)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// usage is --help's text.
func usage() {
	fmt.Fprint(flag.CommandLine.Output(), `Usage: hack/bench.sh [flags]

Runs kpng and upstream kube-proxy side by side against one real API server,
at each size (with 30,000 services where the machine allows, --with-30k),
then the fan-out (one kpng brain to --fanout-agents agents), and writes
BENCHMARKS.md and docs/bench/*.png from the results. Run as root.

Flags:
`)
	flag.PrintDefaults()
}

// runParent creates the bench namespace, runs this program inside it, then
// deletes every namespace of the run, and writes the report with report.
func runParent(root, outDir, reportDir string, noReport bool, report func(root, dir, resultsDir string) error) int {
	sweepDeadRuns()
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		fatal(err)
	}
	runID := strconv.Itoa(os.Getpid())
	benchNS := nsPrefix + runID + "-api"
	if _, err := netnstest.Create(benchNS); err != nil {
		fatal(err)
	}
	defer func() {
		names, _ := benchNamespaces(os.Getpid())
		for _, n := range names {
			if err := netnstest.Delete(n); err != nil {
				logf("cleanup: %v", err)
			}
		}
	}()
	self, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", benchNS, self}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), envChild+"="+runID)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The child gets the terminal's signals itself; the parent waits.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	code := 0
	if err := cmd.Run(); err != nil {
		logf("bench: %v", err)
		code = 1
	}
	// A run that did not finish leaves the page as it was: its last
	// size's results may be half-measured. What it saved stays in outDir
	// for --report-only.
	if code != 0 && !noReport {
		logf("report: the run did not finish: %s left as it was (hack/bench.sh --report-only writes it from the results in %s)",
			filepath.Join(reportDir, "BENCHMARKS.md"), outDir)
		return code
	}
	if !noReport {
		if err := report(root, reportDir, outDir); err != nil {
			logf("report: %v", err)
			code = 1
		}
	}
	return code
}

// buildAtHead builds pkgs (./cmd/kpng, ./hack/bench-fanout) of the
// repository's HEAD (not of the working tree, which may hold others'
// unfinished changes) into dir, each named after its last element, and
// returns the commit.
func buildAtHead(root, dir string, pkgs ...string) (commit string, err error) {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	commit = strings.TrimSpace(string(out))
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("sh", "-c", `git -C "$1" archive HEAD | tar -x -C "$2"`, "sh", root, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive HEAD: %w: %s", err, out)
	}
	// -o naming a directory (its trailing separator) builds each
	// package's command into it.
	build := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s at %s: %w\n%s", strings.Join(pkgs, " "), commit, err, out)
	}
	return commit, nil
}

// binaryVersion returns the first line of `bin --version` ("Kubernetes
// v1.36.3"), or says why there is none.
func binaryVersion(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return fmt.Sprintf("unknown (%s --version: %v)", filepath.Base(bin), err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// apiServerBinary is the kube-apiserver that test/integration/apiserver
// starts: $KPNG_KUBE_APISERVER, else .cache/bin's.
func apiServerBinary(root string) string {
	if p := os.Getenv(apiserver.EnvKubeAPIServer); p != "" {
		return p
	}
	return filepath.Join(root, ".cache", "bin", "kube-apiserver")
}

// repoRoot walks up from the working directory to kpng's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/kpng/kpng\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the kpng repository")
		}
		dir = parent
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

// logf prints a timestamped line (and keeps the progress line below it).
func logf(format string, args ...any) {
	status.mu.Lock()
	defer status.mu.Unlock()
	status.clearLocked()
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	status.drawLocked()
}

// status is the progress line: rewritten in place on a terminal, printed
// every 10 seconds (and at each change of step) otherwise.
var status = &progress{tty: term.IsTerminal(int(os.Stderr.Fd()))}

type progress struct {
	mu      sync.Mutex
	tty     bool
	line    string
	step    string
	printed time.Time
}

func (p *progress) set(n int, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	load := loadAvg()
	line := fmt.Sprintf("[%d services] %s (load %.2f)", n, msg, load[0])
	step, _, _ := strings.Cut(msg, ":")
	p.clearLocked()
	p.line = line
	if p.tty {
		p.drawLocked()
		return
	}
	if step != p.step || time.Since(p.printed) >= 10*time.Second {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), line)
		p.printed = time.Now()
	}
	p.step = step
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	p.line = ""
}

func (p *progress) clearLocked() {
	if p.tty && p.line != "" {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}

func (p *progress) drawLocked() {
	if p.tty && p.line != "" {
		fmt.Fprint(os.Stderr, p.line)
	}
}

// loadAvg reads the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

// sampleLoad appends the 1-minute load average every 15 seconds.
func sampleLoad(ctx context.Context, mu *sync.Mutex, out *[]float64) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		mu.Lock()
		*out = append(*out, loadAvg()[0])
		mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// machine describes this machine.
func machine() Machine {
	m := Machine{LoadStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "model name":
				if m.CPUModel == "" {
					m.CPUModel = strings.TrimSpace(v)
				}
			case "processor":
				m.Cores++
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
