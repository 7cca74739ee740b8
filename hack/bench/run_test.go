package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeProxy is a proxy that is never started: its first sync and its exit
// are the test's to trigger.
func fakeProxy(name string) *proxy {
	return &proxy{kind: proxyKind{Name: name}, synced: make(chan struct{}), exited: make(chan struct{}),
		logPath: name + ".log", started: time.Now()}
}

func (p *proxy) fakeSync() { p.fakeSyncAt(time.Now()) }

func (p *proxy) fakeSyncAt(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.firstSync = at
	close(p.synced)
}

// Two proxies that never sync both time out at the one deadline: the
// second is not waited on for ever once the first has used the deadline up.
// The proxies are a group of the run's: each one's figures go to its own
// result, not to the run's first ones.
func TestWaitColdStartTimesOutEveryProxyThatNeverSyncs(t *testing.T) {
	proxies := []*proxy{fakeProxy("synced"), fakeProxy("stuck-1"), fakeProxy("stuck-2"), fakeProxy("exits"), fakeProxy("late")}
	proxies[0].fakeSync()
	proxies[3].exitErr = errExample
	close(proxies[3].exited)
	res := &SizeResult{Services: 10}
	res.Proxies = append(res.Proxies, &ProxyResult{Name: "earlier-group"})
	for _, p := range proxies {
		res.Proxies = append(res.Proxies, &ProxyResult{Name: p.kind.Name})
	}
	cfg := &config{startTimeout: 200 * time.Millisecond}
	// "late" synced after the deadline (seen only when its turn came):
	// too late to count.
	proxies[4].fakeSyncAt(time.Now().Add(time.Hour))

	done := make(chan []*proxy)
	go func() { done <- waitColdStart(context.Background(), cfg, proxies, res) }()
	var live []*proxy
	select {
	case live = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waitColdStart still waiting 10s after a 200ms start timeout")
	}

	if len(live) != 1 || live[0] != proxies[0] {
		t.Errorf("live = %v, want only the proxy that synced", names(live))
	}
	if r := res.proxy("earlier-group"); r.Error != "" || r.FirstSyncSeconds != 0 || r.NoSyncWithin != "" {
		t.Errorf("a proxy of another group got figures: %+v", r)
	}
	for _, name := range []string{"stuck-1", "stuck-2", "late"} {
		r := res.proxy(name)
		if r.NoSyncWithin != "200ms" || !strings.Contains(r.Error, "did not sync within 200ms") {
			t.Errorf("%s: NoSyncWithin %q, Error %q; want a start timeout of 200ms", r.Name, r.NoSyncWithin, r.Error)
		}
	}
	if r := res.proxy("exits"); r.NoSyncWithin != "" || !strings.Contains(r.Error, "exited before its first sync") {
		t.Errorf("exits: NoSyncWithin %q, Error %q; want an exit", r.NoSyncWithin, r.Error)
	}
	if r := res.proxy("synced"); r.Error != "" || r.FirstSyncSeconds <= 0 {
		t.Errorf("synced: Error %q, FirstSyncSeconds %v", r.Error, r.FirstSyncSeconds)
	}
}

// A sync that happened before the deadline counts even when the deadline
// has passed by the time the proxy's turn comes.
func TestWaitFirstSyncPrefersASyncSeenToAPassedDeadline(t *testing.T) {
	p := fakeProxy("p")
	p.fakeSync()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 {
		if err := p.waitFirstSync(ctx); err != nil {
			t.Fatalf("waitFirstSync = %v, want nil: the proxy synced", err)
		}
	}
}

type exampleError struct{}

func (exampleError) Error() string { return "exit status 1" }

var errExample = exampleError{}

// metricsServer serves the gauges drain reads: a proxy with nothing
// pending whose last sync ended at lastSync.
func metricsServer(t *testing.T, lastSync time.Time) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s 0\n%s 0\n%s{ip_family=\"IPv4\"} %f\n", metricEndpointsPend, metricServicesPend, metricLastSync,
			float64(lastSync.UnixNano())/1e9)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A proxy that applied the last change before the bench's write request
// returned has caught up (it used to wait for its next periodic sync, 30 s
// later, and was charged that time and its CPU); one whose last sync
// ended before the last write began has not.
func TestDrainCountsASyncThatEndedBeforeTheWriteReturned(t *testing.T) {
	writeBegan := time.Now()
	fast := fakeProxy("fast")
	fast.metrics = metricsServer(t, writeBegan.Add(10*time.Millisecond))
	stale := fakeProxy("stale")
	stale.metrics = metricsServer(t, writeBegan.Add(-time.Second))
	writeReturned := writeBegan.Add(50 * time.Millisecond)

	caught := drain(context.Background(), &config{drainTimeout: time.Second}, []*proxy{fast, stale}, writeBegan, writeReturned, nil)
	if want := writeBegan.Add(10 * time.Millisecond); caught[0].at.Sub(want).Abs() > time.Millisecond {
		t.Errorf("fast: caught up at %v, want %v", caught[0].at, want)
	}
	if !caught[1].at.IsZero() {
		t.Errorf("stale: caught up at %v, want not at all: its last sync ended before the write began", caught[1].at)
	}
}

// Each kpng backend runs beside kube-proxy in its own mode, the modes one
// after the other; kpng-ebpf, without a kube-proxy mode, alone.
func TestGroupsPairEachBackendWithItsMode(t *testing.T) {
	var proxies []*proxy
	for i, k := range proxyKinds {
		proxies = append(proxies, &proxy{kind: k, index: i})
	}
	var got [][]string
	for _, g := range groupProxies(proxies, false) {
		got = append(got, strings.Split(groupNames(g), ", "))
	}
	want := [][]string{
		{"kpng-nft", "kube-proxy-nftables"},
		{"kpng-nft-1s"},
		{"kpng-iptables", "kube-proxy-iptables"},
		{"kpng-ebpf"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
	if all := groupProxies(proxies, true); len(all) != 1 || len(all[0]) != len(proxyKinds) {
		t.Errorf("together: %d groups", len(all))
	}
	r := &SizeResult{Groups: want, Machine: Machine{Cores: 2}}
	if s, w := howRun(r), "the proxies ran in 4 groups, one after the other against the same API server and cluster "+
		"(each from its cold start to its last reading): kpng-nft and kube-proxy-nftables; then kpng-nft-1s; then kpng-iptables "+
		"and kube-proxy-iptables; then kpng-ebpf."; !strings.HasPrefix(s, w) {
		t.Errorf("howRun = %q, want it to start %q", s, w)
	}
}

// The churn and the burst run once per proxy of a group of more than one,
// the others stopped; not with --together, nor the phases that create and
// delete the same Services.
func TestPhasesInTurns(t *testing.T) {
	two := []*proxy{fakeProxy("a"), fakeProxy("b")}
	for _, tc := range []struct {
		phase    string
		live     []*proxy
		together bool
		want     bool
	}{
		{phaseChurn, two, false, true},
		{phaseBurst, two, false, true},
		{phaseCreate, two, false, false},
		{phaseDelete, two, false, false},
		{phaseChurn, two[:1], false, false},
		{phaseChurn, two, true, false},
	} {
		if got := inTurns(&config{together: tc.together}, tc.phase, tc.live); got != tc.want {
			t.Errorf("inTurns(%s, %d proxies, together %v) = %v, want %v", tc.phase, len(tc.live), tc.together, got, tc.want)
		}
	}
	r := &SizeResult{Groups: [][]string{{"a", "b"}, {"c"}}, InTurns: []string{phaseChurn, phaseBurst}, Machine: Machine{Cores: 2}}
	if s, w := howRun(r), "except in the churn and burst, which ran once for each proxy of a group while its other proxies were stopped"; !strings.Contains(s, w) {
		t.Errorf("howRun = %q, want it to say %q", s, w)
	}
}

// pause stops a proxy's process and resumes it.
func TestPause(t *testing.T) {
	p := fakeProxy("sleeper")
	p.cmd = exec.Command("sleep", "60")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.exited })
	// state is the process's state letter in /proc/PID/stat, once it is
	// want (a signal is delivered asynchronously).
	state := func(want byte) byte {
		t.Helper()
		var got byte
		for range 500 {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if got = s[strings.LastIndexByte(s, ')')+2]; got == want {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return got
	}
	pause([]*proxy{p}, true)
	if s := state('T'); s != 'T' {
		t.Fatalf("after pause: state %c, want T (stopped)", s)
	}
	pause([]*proxy{p}, false)
	if s := state('S'); s != 'S' {
		t.Fatalf("after resume: state %c, want S (sleeping)", s)
	}
}

// --groups runs only the proxies of the groups named, with --ebpf-only
// narrowing further.
func TestKindsOfGroups(t *testing.T) {
	got := func(cfg *config) []string {
		var out []string
		for _, k := range cfg.kinds() {
			out = append(out, k.Name)
		}
		return out
	}
	if all := got(&config{}); len(all) != len(proxyKinds) {
		t.Errorf("no --groups: %v", all)
	}
	if g := got(&config{groups: []string{"nftables"}}); !slices.Equal(g, []string{"kpng-nft", "kube-proxy-nftables"}) {
		t.Errorf("--groups nftables: %v", g)
	}
	if g := got(&config{groups: []string{"iptables", "ebpf"}}); !slices.Equal(g, []string{"kpng-iptables", "kube-proxy-iptables", "kpng-ebpf"}) {
		t.Errorf("--groups iptables,ebpf: %v", g)
	}
	if g := got(&config{groups: []string{"nftables"}, ebpfOnly: true}); len(g) != 0 {
		t.Errorf("--groups nftables --ebpf-only: %v", g)
	}
	if !slices.Equal(groupNamesKnown(), []string{"nftables", "nftables-1s", "iptables", "ebpf"}) {
		t.Errorf("groups: %v", groupNamesKnown())
	}
}
