package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The cold start's CPU time and RSS are the proxy's at its first complete
// sync, not at the moment the bench gets round to reading them: a process
// that reports its sync and then burns CPU is charged only what it used
// before.
func TestColdStartUsageIsReadAtTheFirstSync(t *testing.T) {
	p := &proxy{
		kind: proxyKind{Name: "spinner", synced: func(line string) bool { return strings.Contains(line, "first sync done") }},
		// ns is empty: run without a network namespace.
		logPath: filepath.Join(t.TempDir(), "spinner.log"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	startAndSync(ctx, t, p, "echo first sync done; while :; do :; done")
	// Let it use half a second of CPU after its sync.
	for {
		u, err := p.usage()
		if err != nil {
			t.Fatal(err)
		}
		if u.CPUSeconds >= 0.5 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the spinner used only %.2fs of CPU in 30s", u.CPUSeconds)
		}
		time.Sleep(50 * time.Millisecond)
	}

	res := &SizeResult{Proxies: []*ProxyResult{{Name: "spinner"}}}
	live := waitColdStart(context.Background(), &config{startTimeout: time.Minute}, []*proxy{p}, res)
	r := res.Proxies[0]
	if len(live) != 1 || r.Error != "" {
		t.Fatalf("live %v, error %q", names(live), r.Error)
	}
	if r.ColdStartCPUSeconds >= 0.3 {
		t.Errorf("cold-start CPU %.2fs: read after the sync, not at it (the spinner used under 0.3s before it)", r.ColdStartCPUSeconds)
	}
	if r.RSSAfterStartMB <= 0 {
		t.Errorf("RSS at the first sync: %v MB", r.RSSAfterStartMB)
	}
}

// startAndSync runs script as proxy p, stopped at the test's end, and
// waits for its first sync.
func startAndSync(ctx context.Context, t *testing.T, p *proxy, script string) {
	t.Helper()
	if err := p.start([]string{"sh", "-c", script}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	if err := p.waitFirstSync(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBinaryVersion(t *testing.T) {
	if v := binaryVersion("/bin/sh-that-does-not-exist"); !strings.HasPrefix(v, "unknown (") {
		t.Errorf("version of a missing binary: %q", v)
	}
	// A program whose --version prints several lines: the first is kept.
	bin := filepath.Join(t.TempDir(), "kube-proxy")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Kubernetes v1.36.3'\necho 'more'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if v := binaryVersion(bin); v != "Kubernetes v1.36.3" {
		t.Errorf("binaryVersion = %q, want the first line", v)
	}
}

// The cold start's split comes from each proxy's own log lines: when it
// had listed what its first sync needs, and what that sync took.
func TestColdStartSplitFromTheLog(t *testing.T) {
	kpngLog := `I1128 11:49:27.121372   31512 kube.go:180] "Synced with the API server" took="46ms" services=102 endpointSlices=101
I1128 11:49:27.132843   31512 feed.go:76] "Node view changed" events=205 clusterRevision=206 viewRevision=1
I1128 11:49:27.364541   31512 run.go:273] "Dataplane synced" revision=1 services=102 took="219.474633ms"`
	kubeProxyLog := `I1128 11:49:27.563260   31516 shared_informer.go:409] "Caches are synced"
I1128 11:49:27.813748   31516 shared_informer.go:388] "Caches are synced" controller="node config"
I1128 11:49:27.912952   31516 shared_informer.go:388] "Caches are synced" controller="service config"
I1128 11:49:27.912986   31516 shared_informer.go:388] "Caches are synced" controller="endpoint slice config"
I1128 11:49:28.045410   31516 proxier.go:1088] "SyncProxyRules complete" ipFamily="IPv4" elapsed="132.33591ms"`
	// Without the EndpointSlice informer's line, kube-proxy has not listed.
	noSlices := strings.Replace(kubeProxyLog, `controller="endpoint slice config"`, `controller="serviceCIDR config"`, 1)
	for _, tc := range []struct {
		name       string
		kind       proxyKind
		log        string
		wantListed bool
		wantTook   time.Duration
	}{
		{"kpng", kpngKind("kpng-nft", "kube-proxy-nftables", "to-nft"), kpngLog, true, 219474633 * time.Nanosecond},
		{"kube-proxy", kubeProxyKind("kube-proxy-nftables", "nftables"), kubeProxyLog, true, 132335910 * time.Nanosecond},
		{"kube-proxy without slices", kubeProxyKind("kube-proxy-nftables", "nftables"), noSlices, false, 132335910 * time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &proxy{kind: tc.kind, logPath: filepath.Join(t.TempDir(), "proxy.log")}
			// The lines, then a wait: the process must be alive when its
			// sync line is seen (its usage is read then).
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			startAndSync(ctx, t, p, "cat <<'EOF'\n"+tc.log+"\nEOF\nexec sleep 60")
			listed, took := p.coldStartSplit()
			if got := listed > 0; got != tc.wantListed {
				t.Errorf("listed after %v; want a time: %v", listed, tc.wantListed)
			}
			if listed > p.firstSyncAfter() {
				t.Errorf("listed after %v, later than the first sync (%v)", listed, p.firstSyncAfter())
			}
			if took != tc.wantTook {
				t.Errorf("the first sync took %v, want %v", took, tc.wantTook)
			}
		})
	}
}

// A duration of a minute or more is written with its minutes (and hours)
// first: all of it is read, not its first unit.
func TestLogDurationOfMinutes(t *testing.T) {
	took, elapsed := logDuration("took"), logDuration("elapsed")
	for _, tc := range []struct {
		read func(string) (time.Duration, bool)
		line string
		want time.Duration
	}{
		{took, `"Synced nftables table" family="IPv4" took="1m2.760310584s"`, time.Minute + 2760310584*time.Nanosecond},
		{elapsed, `"SyncProxyRules complete" ipFamily="IPv4" elapsed="4m34.458403832s"`, 4*time.Minute + 34458403832*time.Nanosecond},
		{took, `took=1h2m3s x=1`, time.Hour + 2*time.Minute + 3*time.Second},
		{took, `took="219.474633ms"`, 219474633 * time.Nanosecond},
		{took, `took="949µs"`, 949 * time.Microsecond},
	} {
		if got, ok := tc.read(tc.line); !ok || got != tc.want {
			t.Errorf("%s: read %v (%v), want %v", tc.line, got, ok, tc.want)
		}
	}
}

// profileCPU asks each proxy's metrics server for a CPU profile over the
// churn, in whole seconds, and writes it beside the size's results; a
// refusal is logged with what the server said, and writes nothing.
func TestProfileCPU(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.String())
		if r.URL.Path != "/debug/pprof/profile" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "profile of %s s", r.URL.Query().Get("seconds"))
	}))
	defer srv.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Could not enable CPU profiling: cpu profiling already in use", http.StatusInternalServerError)
	}))
	defer refusing.Close()

	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "run-100"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := &config{cpuProfiles: true, churnFor: 1400 * time.Millisecond, outDir: out}
	ok := &proxy{kind: proxyKind{Name: "a"}, metrics: strings.TrimPrefix(srv.URL, "http://")}
	bad := &proxy{kind: proxyKind{Name: "b"}, metrics: strings.TrimPrefix(refusing.URL, "http://")}
	profileCPU(context.Background(), cfg, 100, []*proxy{ok, bad}, phaseChurn)()

	if want := []string{"/debug/pprof/profile?seconds=1"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v, want %v", asked, want)
	}
	got, err := os.ReadFile(filepath.Join(out, "run-100", "a.churn.cpu.pprof"))
	if err != nil || string(got) != "profile of 1 s" {
		t.Errorf("a's profile: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(out, "run-100", "b.churn.cpu.pprof")); !os.IsNotExist(err) {
		t.Errorf("b's refused profile was written (stat: %v)", err)
	}
	if err := bad.cpuProfile(context.Background(), time.Second, filepath.Join(out, "x")); err == nil ||
		!strings.Contains(err.Error(), "already in use") {
		t.Errorf("refused profile: error %v, want the server's reason", err)
	}

	cfg.cpuProfiles = false
	asked = nil
	profileCPU(context.Background(), cfg, 100, []*proxy{ok}, phaseChurn)()
	if len(asked) != 0 {
		t.Errorf("without --cpu-profiles: asked %v", asked)
	}
}
