package main

import (
	"context"
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
func TestWaitColdStartTimesOutEveryProxyThatNeverSyncs(t *testing.T) {
	proxies := []*proxy{fakeProxy("synced"), fakeProxy("stuck-1"), fakeProxy("stuck-2"), fakeProxy("exits"), fakeProxy("late")}
	proxies[0].fakeSync()
	proxies[3].exitErr = errExample
	close(proxies[3].exited)
	res := &SizeResult{Services: 10}
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
	for _, i := range []int{1, 2, 4} {
		r := res.Proxies[i]
		if r.NoSyncWithin != "200ms" || !strings.Contains(r.Error, "did not sync within 200ms") {
			t.Errorf("%s: NoSyncWithin %q, Error %q; want a start timeout of 200ms", r.Name, r.NoSyncWithin, r.Error)
		}
	}
	if r := res.Proxies[3]; r.NoSyncWithin != "" || !strings.Contains(r.Error, "exited before its first sync") {
		t.Errorf("exits: NoSyncWithin %q, Error %q; want an exit", r.NoSyncWithin, r.Error)
	}
	if r := res.Proxies[0]; r.Error != "" || r.FirstSyncSeconds <= 0 {
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

func names(ps []*proxy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.kind.Name)
	}
	return out
}
