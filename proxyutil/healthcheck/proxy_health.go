package healthcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/internal/httpserve"
	"github.com/kpng/kpng/proxyutil/metrics"
)

// ProxierHealth is the health of the proxy for one IP family.
type ProxierHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// ProxyHealth is the proxy's health, as kube-proxy's /healthz and /livez
// write it.
type ProxyHealth struct {
	// LastUpdated is the newest of the families' last updates.
	LastUpdated  time.Time `json:"lastUpdated"`
	CurrentTime  time.Time `json:"currentTime"`
	NodeEligible *bool     `json:"nodeEligible,omitempty"`
	// NodeStatus says, on /healthz, why the node is not eligible: kpng's
	// detail, which kube-proxy's answer does not have.
	NodeStatus string `json:"nodeStatus,omitempty"`
	// Healthy is true when every family is.
	Healthy bool `json:"healthy"`
	// Status is per family: "IPv4", "IPv6".
	Status map[string]ProxierHealth `json:"status,omitempty"`
}

// ProxyHealthServer is the proxy's own health server (kube-proxy's
// healthzBindAddress, 0.0.0.0:10256 by default): /healthz and /livez.
//
// A family is unhealthy when a change was queued (OnQueued) and no sync
// succeeded (OnSync) within healthTimeout after it; kube-proxy uses twice
// its syncPeriod. /livez reports just that; /healthz also answers 503 while
// the node is not eligible for traffic, which here means its Node object is
// not (yet) in the view.
type ProxyHealthServer struct {
	addr          string
	healthTimeout time.Duration
	now           func() time.Time

	mu            sync.RWMutex
	lastUpdated   map[localv1.IPFamily]time.Time
	oldestPending map[localv1.IPFamily]time.Time
	families      []localv1.IPFamily
	nodeKnown     bool
	nodeName      string // of the last view seen, "" before the first
}

// NewProxyHealthServer returns a health server for a proxy that serves the
// given families (both when none is given). The families count as updated
// now, as kube-proxy's sync loop marks them when it starts, so a proxy
// whose first sync never succeeds turns unhealthy.
func NewProxyHealthServer(addr string, healthTimeout time.Duration, families ...localv1.IPFamily) *ProxyHealthServer {
	return newProxyHealthServer(addr, healthTimeout, time.Now, families...)
}

func newProxyHealthServer(addr string, healthTimeout time.Duration, now func() time.Time, families ...localv1.IPFamily) *ProxyHealthServer {
	if len(families) == 0 {
		families = []localv1.IPFamily{localv1.IPFamily_IPV4, localv1.IPFamily_IPV6}
	}
	hs := &ProxyHealthServer{
		addr: addr, healthTimeout: healthTimeout, now: now, families: families,
		lastUpdated:   map[localv1.IPFamily]time.Time{},
		oldestPending: map[localv1.IPFamily]time.Time{},
	}
	for _, f := range families {
		hs.Updated(f)
	}
	return hs
}

// Updated records that family's dataplane implements the latest view.
func (hs *ProxyHealthServer) Updated(family localv1.IPFamily) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	delete(hs.oldestPending, family)
	hs.lastUpdated[family] = hs.now()
}

// QueuedUpdate records that family has a change to sync; the oldest
// unsynced change is the one that counts.
func (hs *ProxyHealthServer) QueuedUpdate(family localv1.IPFamily) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if _, set := hs.oldestPending[family]; !set {
		hs.oldestPending[family] = hs.now()
	}
}

// OnQueued is a backend.Options.OnQueued hook.
func (hs *ProxyHealthServer) OnQueued(state *backend.State, _ backend.Changes) {
	hs.setNode(state)
	for _, f := range hs.families {
		hs.QueuedUpdate(f)
	}
}

// OnSync is a backend.Options.OnSync hook: a successful sync updates every
// family.
func (hs *ProxyHealthServer) OnSync(res backend.SyncResult) {
	if res.Err != nil {
		return
	}
	hs.setNode(res.State)
	for _, f := range hs.families {
		hs.Updated(f)
	}
}

func (hs *ProxyHealthServer) setNode(state *backend.State) {
	if state == nil {
		return
	}
	hs.mu.Lock()
	hs.nodeKnown = state.Node != nil
	hs.nodeName = state.NodeName
	hs.mu.Unlock()
}

// Health returns the proxy's health now.
func (hs *ProxyHealthServer) Health() ProxyHealth {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	h := ProxyHealth{Healthy: true, CurrentTime: hs.now(), Status: map[string]ProxierHealth{}}
	for f, last := range hs.lastUpdated {
		if last.After(h.LastUpdated) {
			h.LastUpdated = last
		}
		healthy := true
		if queued, pending := hs.oldestPending[f]; pending && h.CurrentTime.Sub(queued) >= hs.healthTimeout {
			healthy = false
			h.Healthy = false
		}
		h.Status[metrics.FamilyLabel(f)] = ProxierHealth{LastUpdated: last, Healthy: healthy}
	}
	return h
}

// NodeEligible reports whether the node may receive traffic: its Node
// object is in the view. (kube-proxy also refuses a node being deleted or
// tainted ToBeDeletedByClusterAutoscaler; the view does not carry those
// yet.)
func (hs *ProxyHealthServer) NodeEligible() bool {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	return hs.nodeKnown
}

// nodeStatus says why the node is not eligible.
func (hs *ProxyHealthServer) nodeStatus() string {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	switch {
	case hs.nodeKnown:
		return ""
	case hs.nodeName == "":
		return "no view of this node yet (waiting for its Node object at start-up, as kube-proxy)"
	}
	return fmt.Sprintf("no Node object named %q: check --hostname-override / --node-name against the cluster's Nodes", hs.nodeName)
}

// Handler returns the /healthz and /livez routes.
func (hs *ProxyHealthServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := hs.Health()
		eligible := hs.NodeEligible()
		h.NodeEligible = &eligible
		if !eligible {
			h.NodeStatus = hs.nodeStatus()
		}
		hs.answer(w, h, h.Healthy && eligible, metrics.ProxyHealthzTotal)
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		h := hs.Health()
		hs.answer(w, h, h.Healthy, metrics.ProxyLivezTotal)
	})
	return mux
}

func (hs *ProxyHealthServer) answer(w http.ResponseWriter, h ProxyHealth, healthy bool, counter *k8smetrics.CounterVec) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if healthy {
		counter.WithLabelValues("200").Inc()
		w.WriteHeader(http.StatusOK)
		// Older kube-proxies reported the last sync loop run here; a healthy
		// proxy keeps that meaning by answering "now".
		h.LastUpdated = hs.now()
	} else {
		counter.WithLabelValues("503").Inc()
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	out, _ := json.Marshal(h)
	_, _ = w.Write(out)
}

// Listen opens the server's socket.
func (hs *ProxyHealthServer) Listen() (net.Listener, error) {
	return httpserve.Listen("proxy healthz", hs.addr)
}

// Serve serves on ln until ctx ends, then returns nil.
func (hs *ProxyHealthServer) Serve(ctx context.Context, ln net.Listener) error {
	if err := httpserve.Serve(ctx, hs.Handler(), ln); err != nil {
		return fmt.Errorf("proxy healthz: %w", err)
	}
	return nil
}

// Run listens on the server's address and serves until ctx ends. A bind
// failure returns at once; kube-proxy retries every 5 seconds unless
// bindAddressHardFail is set, which is the caller's choice.
func (hs *ProxyHealthServer) Run(ctx context.Context) error {
	ln, err := hs.Listen()
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(3).Info("Starting healthz HTTP server", "address", ln.Addr().String())
	return hs.Serve(ctx, ln)
}
