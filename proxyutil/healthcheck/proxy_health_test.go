package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/internal/metricstest"
	"github.com/kpng/kpng/proxyutil/metrics"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }

func withNode() *backend.State {
	st := backend.NewState("n1")
	st.Node = &localv1.Node{Name: "n1", Addresses: []string{"192.0.2.10"}}
	return st
}

func TestProxyHealthStaleness(t *testing.T) {
	v4, v6 := localv1.IPFamily_IPV4, localv1.IPFamily_IPV6
	clk := &clock{t: time.Unix(1000, 0)}
	hs := newProxyHealthServer("", 10*time.Second, clk.now)
	st := withNode()

	if h := hs.Health(); !h.Healthy || len(h.Status) != 2 {
		t.Fatalf("at start: %+v, want healthy with two families", h)
	}
	// Nothing queued: healthy however long nothing happens.
	clk.add(time.Hour)
	if !hs.Health().Healthy {
		t.Errorf("idle proxy unhealthy")
	}
	hs.OnQueued(st, backend.Changes{})
	clk.add(9 * time.Second)
	if !hs.Health().Healthy {
		t.Errorf("unhealthy before the timeout")
	}
	// A later change does not move the oldest pending one.
	hs.OnQueued(st, backend.Changes{})
	clk.add(time.Second)
	h := hs.Health()
	if h.Healthy || h.Status["IPv4"].Healthy || h.Status["IPv6"].Healthy {
		t.Errorf("a change queued for the timeout: %+v, want unhealthy", h)
	}
	// A failed sync changes nothing; a successful one heals.
	hs.OnSync(backend.SyncResult{State: st, Err: errors.New("boom")})
	if hs.Health().Healthy {
		t.Errorf("healthy after a failed sync")
	}
	hs.OnSync(backend.SyncResult{State: st})
	h = hs.Health()
	if !h.Healthy || !h.LastUpdated.Equal(clk.t) || !h.CurrentTime.Equal(clk.t) {
		t.Errorf("after a sync: %+v", h)
	}
	// Per family: only IPv6 late.
	hs.QueuedUpdate(v6)
	clk.add(5 * time.Second)
	hs.QueuedUpdate(v4)
	clk.add(5 * time.Second)
	h = hs.Health()
	if h.Healthy || !h.Status["IPv4"].Healthy || h.Status["IPv6"].Healthy {
		t.Errorf("IPv6 late only: %+v", h)
	}
	hs.Updated(v6)
	if !hs.Health().Healthy {
		t.Errorf("both within the timeout: unhealthy")
	}
}

func TestProxyHealthOneFamily(t *testing.T) {
	hs := newProxyHealthServer("", time.Second, time.Now, localv1.IPFamily_IPV6)
	if h := hs.Health(); len(h.Status) != 1 || !h.Status["IPv6"].Healthy {
		t.Errorf("status %+v, want IPv6 only", h.Status)
	}
}

func getJSON(t *testing.T, url string, into any) (int, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("%s: %v: %s", url, err, body)
		}
	}
	return resp.StatusCode, resp.Header
}

func TestProxyHealthHTTP(t *testing.T) {
	metrics.Register(metrics.ModeNFTables)
	metrics.ProxyHealthzTotal.Reset()
	metrics.ProxyLivezTotal.Reset()
	clk := &clock{t: time.Unix(5000, 0).UTC()}
	hs := newProxyHealthServer("127.0.0.1:0", 10*time.Second, clk.now, localv1.IPFamily_IPV4)
	ln, err := hs.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	base := "http://" + ln.Addr().String()

	// No view yet: the node is not known, so /healthz fails, /livez passes.
	var h ProxyHealth
	code, hdr := getJSON(t, base+"/healthz", &h)
	if code != 503 || h.NodeEligible == nil || *h.NodeEligible || !h.Healthy || !strings.Contains(h.NodeStatus, "no view of this node yet") {
		t.Errorf("/healthz before any view: %d %+v", code, h)
	}
	if hdr.Get("Content-Type") != "application/json" || hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", hdr)
	}
	h = ProxyHealth{}
	if code, _ := getJSON(t, base+"/livez", &h); code != 200 || h.NodeEligible != nil || !h.Healthy {
		t.Errorf("/livez before any view: %d %+v", code, h)
	}

	hs.OnQueued(withNode(), backend.Changes{Reset: true})
	hs.OnSync(backend.SyncResult{State: withNode(), Changes: backend.Changes{Reset: true}})
	clk.add(time.Minute) // idle: still healthy, and lastUpdated reads "now"
	h = ProxyHealth{}
	if code, _ := getJSON(t, base+"/healthz", &h); code != 200 || !*h.NodeEligible || h.NodeStatus != "" || !h.LastUpdated.Equal(clk.t) || !h.Status["IPv4"].Healthy {
		t.Errorf("/healthz synced: %d %+v", code, h)
	}

	hs.OnQueued(withNode(), backend.Changes{})
	clk.add(20 * time.Second)
	h = ProxyHealth{}
	if code, _ := getJSON(t, base+"/healthz", &h); code != 503 || h.Healthy || h.Status["IPv4"].Healthy {
		t.Errorf("/healthz stale: %d %+v", code, h)
	}
	if code, _ := getJSON(t, base+"/livez", nil); code != 503 {
		t.Errorf("/livez stale: %d", code)
	}

	for _, c := range []struct {
		vec  string
		code string
		want float64
	}{{"healthz", "200", 1}, {"healthz", "503", 2}, {"livez", "200", 1}, {"livez", "503", 1}} {
		vec := metrics.ProxyHealthzTotal
		if c.vec == "livez" {
			vec = metrics.ProxyLivezTotal
		}
		if got := metricstest.Counter(t, vec.WithLabelValues(c.code)); got != c.want {
			t.Errorf("proxy_%s_total{code=%s} = %v, want %v", c.vec, c.code, got, c.want)
		}
	}

	// A view whose Node object does not exist: not eligible, and /healthz
	// says which name has no Node.
	hs.OnSync(backend.SyncResult{State: backend.NewState("n1"), Changes: backend.Changes{}})
	h = ProxyHealth{}
	if code, _ := getJSON(t, base+"/healthz", &h); code != 503 || *h.NodeEligible || !strings.Contains(h.NodeStatus, `no Node object named "n1"`) {
		t.Errorf("/healthz without a Node: %d %+v", code, h)
	}
}
