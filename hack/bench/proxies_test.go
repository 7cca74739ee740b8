package main

import (
	"context"
	"os"
	"path/filepath"
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
	if err := p.start([]string{"sh", "-c", "echo first sync done; while :; do :; done"}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.waitFirstSync(ctx); err != nil {
		t.Fatal(err)
	}
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
