package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proxyKind is one proxy under test, and how to run it.
type proxyKind struct {
	// Name names it in tables and plots.
	Name string
	// Reference is the kube-proxy it is compared with ("" for kube-proxy
	// itself).
	Reference string
	// argv returns the command line.
	argv func(a runArgs) []string
	// synced reports whether a log line says a complete sync of the IPv4
	// rules finished.
	synced func(line string) bool
	// listed are the log lines that, all seen, say the proxy has listed
	// every object its first sync needs from the API server (each
	// matched by all of its substrings); the cold start's split.
	listed [][]string
	// syncTook returns the duration a proxy's "synced" line gives its
	// sync (false if the line has none).
	syncTook func(line string) (time.Duration, bool)
	// Group is the proxies it runs beside: a kpng backend with
	// kube-proxy in the same mode ("nftables", "iptables"); kpng-ebpf
	// and kpng-nft-1s alone. Groups run one after the other
	// (groupProxies).
	Group string
	// ebpf: the proxy needs a cgroup v2 and a BPF filesystem of its node
	// (ebpfNode), and its probe client runs in that cgroup.
	ebpf bool
	// minSync is a kpng proxy's minimum sync period: its backend's
	// default (backendMinSync), or the one its command line gives.
	// Single changes are spaced wider than it (oneChanges).
	minSync time.Duration
}

// runArgs is what a proxy's command line is made of.
type runArgs struct {
	bins             binaries
	kubeconfig       string
	metrics, healthz string // addresses
	iptablesVariant  string // "legacy" or "nft"
	ebpf             *ebpfNode
}

// binaries are the programs the bench runs.
type binaries struct {
	kpng, kubeProxy string
	// benchFanout is hack/bench-fanout, built with kpng.
	benchFanout string
}

// nodeName is the Node every proxy serves.
const nodeName = "bench-node"

// The proxies, run side by side. kpng-nft-1s is kpng's nft backend with
// kube-proxy's minimum sync period (1 s) instead of its own default
// (100 ms): what kpng's shorter default changes shows beside what it does
// not.
var proxyKinds = []proxyKind{
	kpngKind("kpng-nft", "kube-proxy-nftables", "to-nft", "--table=kpngbench"),
	// Not beside kpng-nft: two kpng processes and kube-proxy's two
	// proxiers loading 10,000 services at once on 2 cores gave each kpng
	// half a core, and kpng-nft's cold start its twin's load as well.
	inGroup("nftables-1s", kpngKind("kpng-nft-1s", "kube-proxy-nftables", "to-nft", "--table=kpngbench", "--min-sync-period=1s")),
	kpngKind("kpng-iptables", "kube-proxy-iptables", "to-iptables"),
	kubeProxyKind("kube-proxy-nftables", "nftables"),
	kubeProxyKind("kube-proxy-iptables", "iptables"),
	// kpng's eBPF backend has no kube-proxy mode of its own; its figures
	// are set beside kube-proxy's nftables mode, and its dataplane
	// against the pod's IP (issue 21).
	kpngKind("kpng-ebpf", "kube-proxy-nftables", "to-ebpf"),
}

// inGroup returns k running in group g instead of its mode's.
func inGroup(g string, k proxyKind) proxyKind {
	k.Group = g
	return k
}

// backendMinSync is the default minimum sync period of the backend of
// command backend, as its package's DefaultConfig gives it (this module
// does not import the backends): 1 s for iptables, whose every sync
// restores a whole table, as kube-proxy's.
func backendMinSync(backend string) time.Duration {
	switch backend {
	case "to-iptables":
		return time.Second
	case "to-ebpf":
		return 10 * time.Millisecond
	}
	return 100 * time.Millisecond
}

func kpngKind(name, reference, backend string, extra ...string) proxyKind {
	iptables, ebpf := backend == "to-iptables", backend == "to-ebpf"
	group := "nftables"
	switch {
	case iptables:
		group = "iptables"
	case ebpf:
		group = "ebpf"
	}
	minSync := backendMinSync(backend)
	for _, a := range extra {
		if v, ok := strings.CutPrefix(a, "--min-sync-period="); ok {
			if d, err := time.ParseDuration(v); err == nil {
				minSync = d
			}
		}
	}
	return proxyKind{
		Name: name, Reference: reference, ebpf: ebpf, Group: group, minSync: minSync,
		argv: func(a runArgs) []string {
			argv := append([]string{a.bins.kpng, "--v=2", "kube", "--kubeconfig=" + a.kubeconfig,
				"to-local", "--node-name=" + nodeName, backend,
				"--metrics-bind-address=" + a.metrics, "--healthz-bind-address=" + a.healthz,
				// For the heap profile taken at the end (heapProfile).
				"--profiling"}, extra...)
			if iptables {
				// Told, not detected: an empty namespace holds no rules
				// for kpng's detection to go by.
				argv = append(argv, "--iptables-mode="+a.iptablesVariant)
			}
			if ebpf {
				// Never the default cgroup (the hierarchy's root: every
				// process of the machine), never the host's /sys/fs/bpf:
				// without a node of the bench's, no command at all.
				if a.ebpf == nil {
					return nil
				}
				argv = append(argv, "--ebpf-cgroup-path="+a.ebpf.cgroup, "--ebpf-pin-path="+a.ebpf.pinPath,
					"--ebpf-interfaces="+ebpfInterfaces)
			}
			return argv
		},
		// The driver logs this after every successful sync; the first
		// one holds the whole cluster (the kube source publishes nothing
		// before every watch has listed).
		synced: func(line string) bool { return strings.Contains(line, "Dataplane synced") },
		// The kube source logs this once every watch has listed
		// (sources/kube), before it publishes anything.
		listed:   [][]string{{`"Synced with the API server"`}},
		syncTook: logDuration("took"),
	}
}

func kubeProxyKind(name, mode string) proxyKind {
	return proxyKind{
		Name: name, Group: mode,
		// kube-proxy runs the `iptables` of its PATH, which the bench
		// points at the chosen variant (iptablesEnv).
		argv: func(a runArgs) []string {
			return []string{a.bins.kubeProxy, "--v=2", "--proxy-mode=" + mode,
				"--kubeconfig=" + a.kubeconfig, "--hostname-override=" + nodeName,
				"--metrics-bind-address=" + a.metrics, "--healthz-bind-address=" + a.healthz,
				"--profiling",
				// Leave the conntrack sysctls alone: nf_conntrack_max is
				// global, and kpng is not told to set them either.
				"--conntrack-max-per-core=0",
				"--conntrack-tcp-timeout-established=0",
				"--conntrack-tcp-timeout-close-wait=0",
			}
		},
		// One proxier per family; its first sync waits for the
		// Service and EndpointSlice informers to have listed, so the
		// first IPv4 sync is complete.
		synced: func(line string) bool {
			return strings.Contains(line, "SyncProxyRules complete") && strings.Contains(line, `"IPv4"`)
		},
		// Its proxiers do not sync before these two informers have
		// listed (pkg/proxy/config).
		listed: [][]string{
			{`"Caches are synced"`, `controller="service config"`},
			{`"Caches are synced"`, `controller="endpoint slice config"`},
		},
		syncTook: logDuration("elapsed"),
	}
}

// logDuration returns a function that reads a klog key's Go duration
// (`took="1.2s"`, `took="1m2.7s"`, or unquoted) from a line.
func logDuration(key string) func(line string) (time.Duration, bool) {
	re := regexp.MustCompile(`\b` + key + `="?((?:[0-9][0-9.]*[a-zµ]+)+)"?`)
	return func(line string) (time.Duration, bool) {
		m := re.FindStringSubmatch(line)
		if m == nil {
			return 0, false
		}
		d, err := time.ParseDuration(m[1])
		return d, err == nil
	}
}

// proxy is one running proxy, in its own namespace.
type proxy struct {
	kind    proxyKind
	index   int       // its place in proxyKinds: its address and ports
	ns      string    // the proxy's "node" namespace
	podNS   string    // a pod namespace behind it, for the dataplane probe
	ebpf    *ebpfNode // kpng-ebpf's cgroup and BPF filesystem
	addr    string    // its address on the bench bridge
	metrics string    // host:port of its /metrics
	logPath string

	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{}
	exitErr error

	mu        sync.Mutex
	firstSync time.Time
	// listedSeen marks kind.listed's lines seen; listedAt is when the
	// last of them was.
	listedSeen []bool
	listedAt   time.Time
	// firstSyncTook is the first complete sync's own duration, as its
	// log line gives it (0: not given).
	firstSyncTook time.Duration
	synced        chan struct{} // closed at the first complete sync
	// atFirstSync is the process's usage read when the first complete
	// sync was seen in its log (atFirstSyncErr if it could not be read).
	atFirstSync    ProcUsage
	atFirstSyncErr error
	// waiters are the lines waited for (nextLine), until seen.
	waiters []lineWaiter
}

// lineWaiter is a wait for a log line that re matches: seen is closed
// when one is.
type lineWaiter struct {
	re   *regexp.Regexp
	seen chan struct{}
}

// nextLine returns a channel closed at the proxy's next log line that re
// matches, from now on.
func (p *proxy) nextLine(re *regexp.Regexp) <-chan struct{} {
	w := lineWaiter{re: re, seen: make(chan struct{})}
	p.mu.Lock()
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	return w.seen
}

// start runs the proxy in its namespace, with env added to the bench's
// environment and its output in logPath. The process is forked from a
// goroutine locked to its thread until the process exits, because the
// parent-death signal follows the forking thread, not the process.
func (p *proxy) start(argv, env []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("%s: no command line", p.kind.Name)
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "==== %s\n", strings.Join(argv, " "))
	p.synced = make(chan struct{})
	p.exited = make(chan struct{})
	out := io.MultiWriter(logFile, &lineWatcher{fn: p.onLine})
	if p.ns != "" { // `ip netns exec` execs argv: the pid stays the proxy's
		argv = append([]string{"ip", "netns", "exec", p.ns}, argv...)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...) // the last of a duplicate wins
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// A child left holding the output pipe (an iptables-restore of a
	// killed proxy) must not make Wait hang.
	p.cmd.WaitDelay = 10 * time.Second
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// Taken before the start: the process may print (and its lines
		// be timed against this) before Start returns.
		p.mu.Lock()
		p.started = time.Now()
		p.mu.Unlock()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.exitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		logFile.Close()
		return fmt.Errorf("%s: start: %w", p.kind.Name, err)
	}
	return nil
}

// onLine serves the waits for a line (nextLine), and watches the
// proxy's log for its first complete sync, and reads
// its CPU time and RSS at once: the cold start's cost is the proxy's
// own, however long the other proxies take. (The log line follows the
// end of the sync by the time the pipe takes to carry it.)
func (p *proxy) onLine(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiters = slices.DeleteFunc(p.waiters, func(w lineWaiter) bool {
		if !w.re.MatchString(line) {
			return false
		}
		close(w.seen)
		return true
	})
	if !p.firstSync.IsZero() {
		return
	}
	p.noteListed(line)
	if !p.kind.synced(line) {
		return
	}
	p.firstSync = time.Now()
	// cmd.Process is set before the goroutines that copy the output
	// start.
	p.atFirstSync, p.atFirstSyncErr = readProcUsage(p.cmd.Process.Pid)
	if p.kind.syncTook != nil {
		p.firstSyncTook, _ = p.kind.syncTook(line)
	}
	close(p.synced)
}

// noteListed records the time at which the last of kind.listed's lines
// was seen. Called with p.mu held.
func (p *proxy) noteListed(line string) {
	if p.listedSeen == nil {
		p.listedSeen = make([]bool, len(p.kind.listed))
	}
	missing := 0
	for i, subs := range p.kind.listed {
		if !p.listedSeen[i] && containsAll(line, subs) {
			p.listedSeen[i] = true
		}
		if !p.listedSeen[i] {
			missing++
		}
	}
	if missing == 0 && len(p.kind.listed) > 0 && p.listedAt.IsZero() {
		p.listedAt = time.Now()
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// coldStartSplit returns when, from its start, the proxy had listed what
// its first sync needs (0: not seen), and the first sync's own duration
// (0: not given).
func (p *proxy) coldStartSplit() (listed, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.listedAt.IsZero() {
		listed = p.listedAt.Sub(p.started)
	}
	return listed, p.firstSyncTook
}

// usageAtFirstSync returns the usage read at the first complete sync.
func (p *proxy) usageAtFirstSync() (ProcUsage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstSync.IsZero() {
		return ProcUsage{}, fmt.Errorf("%s: no complete sync", p.kind.Name)
	}
	return p.atFirstSync, p.atFirstSyncErr
}

// waitFirstSync waits for the proxy's first complete sync, and returns
// nil once it happened (even if ctx is done by then), an error if the
// proxy exited without one, or ctx's error if ctx ends first.
func (p *proxy) waitFirstSync(ctx context.Context) error {
	select {
	case <-p.synced:
	case <-p.exited:
	case <-ctx.Done():
	}
	// What happened first wins over what is also true by now (select
	// picks at random among ready cases): a sync, then an exit, then the
	// deadline.
	select {
	case <-p.synced:
		p.mu.Lock()
		at := p.firstSync
		p.mu.Unlock()
		if d, ok := ctx.Deadline(); ok && at.After(d) {
			return context.DeadlineExceeded // seen only now, but too late
		}
		return nil
	default:
	}
	select {
	case <-p.exited:
		return fmt.Errorf("exited before its first sync: %v (log: %s)", p.exitErr, p.logPath)
	default:
	}
	return ctx.Err()
}

// firstSyncAfter returns the time from start to the first complete sync
// (zero if none yet).
func (p *proxy) firstSyncAfter() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstSync.IsZero() {
		return 0
	}
	return p.firstSync.Sub(p.started)
}

func (p *proxy) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop terminates the proxy, and kills it after a grace period.
func (p *proxy) stop() {
	if p.cmd == nil || p.cmd.Process == nil || !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// usage reads the proxy's CPU time and memory from /proc.
func (p *proxy) usage() (ProcUsage, error) {
	if p.cmd == nil || p.cmd.Process == nil {
		return ProcUsage{}, fmt.Errorf("%s was not started", p.kind.Name)
	}
	if !p.running() {
		return ProcUsage{}, fmt.Errorf("%s exited: %v (see %s)", p.kind.Name, p.exitErr, p.logPath)
	}
	return readProcUsage(p.cmd.Process.Pid)
}

var scrapeClient = &http.Client{Timeout: 30 * time.Second}

// scrape reads the proxy's /metrics.
func (p *proxy) scrape(ctx context.Context) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: scrape: %w", p.kind.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: scrape: %w", p.kind.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: scrape: %s", p.kind.Name, resp.Status)
	}
	m, err := ParseMetrics(string(body))
	if err != nil {
		return nil, fmt.Errorf("%s: /metrics: %w", p.kind.Name, err)
	}
	return m, nil
}

// heapProfile writes the proxy's heap profile (/debug/pprof/heap on its
// metrics server, --profiling) to path: what its live heap is made of
// at the end of the run, for `go tool pprof`. The profile is the
// runtime's record as of its last collection; none is forced.
func (p *proxy) heapProfile(ctx context.Context, path string) error {
	return p.profile(ctx, scrapeClient, "heap profile", "/debug/pprof/heap", path)
}

// cpuProfile writes the proxy's CPU profile over the next d (whole
// seconds, /debug/pprof/profile) to path: where its CPU went during a
// phase, for `go tool pprof`.
func (p *proxy) cpuProfile(ctx context.Context, d time.Duration, path string) error {
	secs := max(1, int(d.Round(time.Second).Seconds()))
	// No client timeout: the answer comes after d; ctx bounds the wait.
	return p.profile(ctx, http.DefaultClient, "CPU profile", fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), path)
}

// profile writes the answer of the proxy's metrics server at urlPath
// (one of the /debug/pprof pages) to path.
func (p *proxy) profile(ctx context.Context, c *http.Client, what, urlPath, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+urlPath, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", p.kind.Name, what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s: %s", p.kind.Name, what, resp.Status, bytes.TrimSpace(body))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s: %s: %w", p.kind.Name, what, err)
	}
	return f.Close()
}

// lineWatcher calls fn with each complete line written to it.
type lineWatcher struct {
	fn  func(string)
	buf []byte
}

func (w *lineWatcher) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 { // a runaway line: drop it
		w.buf = w.buf[:0]
	}
	return len(b), nil
}

// metricsPort is proxy i's /metrics port; healthzPort its /healthz.
func metricsPort(i int) string { return strconv.Itoa(10300 + i) }
func healthzPort(i int) string { return strconv.Itoa(10400 + i) }
