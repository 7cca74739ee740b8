// Package brainstatus is what a brain-only process (kpng kube ... to-api)
// reports: /healthz, /readyz and /metrics on a status server, the brain's
// metrics (kpng_brain_*), and a gRPC stats handler that follows the agents
// its Watch server serves. Whoever runs a brain of their own gets the same
// reports by wiring a Status beside server.Server.
package brainstatus

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/source/kube"
)

// The brain's metrics, registered once per process.
var (
	brainMetricsOnce sync.Once

	apiWatchLag = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem: "kpng_brain", Name: "api_watch_lag_seconds",
		Help:           "Time from an EndpointSlice change (its endpoints.kubernetes.io/last-change-trigger-time) to its arrival in the brain's cluster store",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 20),
		StabilityLevel: metrics.ALPHA,
	})
	apiReachable = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "kpng_brain", Name: "api_reachable",
		Help: "1 while the API server answers, 0 from the first failed request to the next successful one", StabilityLevel: metrics.ALPHA,
	})
	clusterRevision = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "kpng_brain", Name: "cluster_revision",
		Help: "The revision of the brain's cluster store (moves when its content changes)", StabilityLevel: metrics.ALPHA,
	})
	agentsConnected = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "kpng_brain", Name: "agents_connected",
		Help: "Watch streams open, by API (localv1: node views computed here; globalv1: node agents that compute their own)", StabilityLevel: metrics.ALPHA,
	}, []string{"api"})
	agentRevisionLag = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: "kpng_brain", Name: "agent_revision_lag",
		Help: "Revisions of the cluster state a globalv1 agent has not applied yet: the revision served minus the one the agent last asked from, by agent (its address, or stream-N on a unix socket)", StabilityLevel: metrics.ALPHA,
	}, []string{"agent"})
	sentBytes = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: "kpng_brain", Name: "sent_bytes_total",
		Help: "Bytes of Watch messages sent to agents (as encoded on the wire), by API", StabilityLevel: metrics.ALPHA,
	}, []string{"api"})
)

func registerBrainMetrics() {
	brainMetricsOnce.Do(func() {
		legacyregistry.MustRegister(apiWatchLag, apiReachable, clusterRevision, agentsConnected, agentRevisionLag, sentBytes)
	})
}

// Status is what a brain-only process reports on its status server and
// metrics: its store, its source, and the agents its gRPC server serves
// (through StatsHandler).
type Status struct {
	store  *cluster.Store
	source cluster.Stage
	// globalRevision is the revision globalv1 agents catch up to
	// (server.Server.GlobalRevision).
	globalRevision func() uint64

	mu      sync.Mutex
	agents  map[string]uint64 // globalv1 agent (address) -> revision it last asked from
	streams atomic.Uint64     // numbers the streams that have no address
}

// New returns the Status of a brain serving store, filled by source;
// globalRevision is the revision globalv1 agents catch up to
// (server.Server.GlobalRevision). It registers the brain's metrics in the
// process-wide registry that /metrics serves.
func New(store *cluster.Store, source cluster.Stage, globalRevision func() uint64) *Status {
	registerBrainMetrics()
	return &Status{store: store, source: source, globalRevision: globalRevision, agents: map[string]uint64{}}
}

// Serve serves /healthz, /readyz and /metrics on ln until ctx ends.
// /healthz answers ok while the process serves; /readyz once the store
// holds a complete state (agents get their first batch at once) and, with
// an API server source, while the API server answers.
func (b *Status) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	metricsHandler := legacyregistry.Handler()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		b.updateLags() // against the revision of this moment
		metricsHandler.ServeHTTP(w, r)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { plain(w, http.StatusOK, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := b.ready(); err != nil {
			plain(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		plain(w, http.StatusOK, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

func plain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, body)
}

// ready says why the brain is not ready, or nil.
func (b *Status) ready() error {
	var synced bool
	b.store.View(func(r cluster.Reader) { synced = r.Synced() })
	if !synced {
		return fmt.Errorf("not ready: the cluster state is not complete yet")
	}
	if s, ok := b.source.(interface{ Status() kube.Status }); ok && !s.Status().Reachable {
		return fmt.Errorf("not ready: the API server does not answer")
	}
	return nil
}

// WatchStore updates the store's metrics at each revision until ctx ends:
// the revision, every agent's lag, the API server's reachability, and the
// watch lag of each EndpointSlice change that carries a trigger time. The
// initial list is not a change: its trigger times are only remembered.
func (b *Status) WatchStore(ctx context.Context) {
	seen := map[string]int64{} // EndpointSlice key -> last trigger time observed
	var rev uint64
	for {
		next, err := b.store.Wait(ctx, rev)
		if err != nil {
			return
		}
		now := time.Now()
		first := rev == 0
		b.store.View(func(r cluster.Reader) {
			next = r.Revision()
			observe := func(key string) {
				for _, sl := range r.EndpointSlices(key) {
					k := sl.Namespace + "/" + sl.Name
					t := sl.TriggerTimeUnixNano
					if t == 0 || seen[k] == t {
						continue
					}
					seen[k] = t
					if !first {
						apiWatchLag.Observe(now.Sub(time.Unix(0, t)).Seconds())
					}
				}
			}
			if first || !r.ChangesSince(rev, func(c cluster.Change) {
				if c.Kind == cluster.ServiceChanged {
					observe(c.Key)
				}
			}) {
				r.ServiceKeys(observe)
			}
		})
		rev = next
		clusterRevision.Set(float64(rev))
		b.updateLags()
		if s, ok := b.source.(interface{ Status() kube.Status }); ok {
			reachable := 0.0
			if s.Status().Reachable {
				reachable = 1
			}
			apiReachable.Set(reachable)
		}
	}
}

// updateLags sets every globalv1 agent's revision lag: the revisions
// served that it has not asked past yet.
func (b *Status) updateLags() {
	rev := b.globalRevision()
	b.mu.Lock()
	defer b.mu.Unlock()
	for agent, at := range b.agents {
		agentRevisionLag.WithLabelValues(agent).Set(float64(rev - min(at, rev)))
	}
}

// StatsHandler returns the handler to give the gRPC server
// (grpc.StatsHandler): it sees every Watch stream, counts the open streams
// and the bytes sent by API, and follows each globalv1 agent's revision
// from its requests.
func (b *Status) StatsHandler() stats.Handler { return statsHandler{b: b} }

type statsHandler struct{ b *Status }

type rpcKey struct{}

type rpcInfo struct {
	api, agent string
}

func (h statsHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	api := ""
	switch info.FullMethodName {
	case localv1.Watch_Watch_FullMethodName:
		api = "localv1"
	case globalv1.Watch_Watch_FullMethodName:
		api = "globalv1"
	}
	// An agent is named by its address; streams over a unix socket have
	// none worth the name, so they are numbered.
	var agent string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil && p.Addr.Network() == "tcp" {
		agent = p.Addr.String()
	} else {
		agent = fmt.Sprintf("stream-%d", h.b.streams.Add(1))
	}
	return context.WithValue(ctx, rpcKey{}, &rpcInfo{api: api, agent: agent})
}

func (h statsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	info, _ := ctx.Value(rpcKey{}).(*rpcInfo)
	if info == nil || info.api == "" {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		agentsConnected.WithLabelValues(info.api).Inc()
	case *stats.End:
		agentsConnected.WithLabelValues(info.api).Dec()
		if info.api == "globalv1" {
			h.b.mu.Lock()
			delete(h.b.agents, info.agent)
			h.b.mu.Unlock()
			agentRevisionLag.DeleteLabelValues(info.agent)
		}
	case *stats.OutPayload:
		sentBytes.WithLabelValues(info.api).Add(float64(s.WireLength))
	case *stats.InPayload:
		if req, ok := s.Payload.(*globalv1.WatchRequest); ok {
			h.b.mu.Lock()
			h.b.agents[info.agent] = req.GetRevision()
			h.b.mu.Unlock()
			h.b.updateLags()
		}
	}
}

func (h statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h statsHandler) HandleConn(context.Context, stats.ConnStats)                       {}
