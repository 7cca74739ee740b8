// Package kube is the source of cluster state that watches a Kubernetes API
// server: Services, discovery/v1 EndpointSlices, Nodes and networking/v1
// ServiceCIDRs, through client-go informers, with kube-proxy's server-side
// selectors.
//
// Every informer event is written to the cluster store as it comes; the
// store drops writes that change nothing, so its revision moves only on
// real change (a relist after an outage rewrites everything and moves
// nothing). The store is marked synced once, when every informer has
// delivered its initial list: no partial state is ever published.
//
// ServiceCIDRs are watched always, as kube-proxy watches them. A server
// older than Kubernetes 1.33 does not serve them: when its answer to the
// list is 404, the first view is published without them, and the informer
// keeps asking, so that they arrive once the server is upgraded, without a
// restart of kpng. A refusal (403: a ClusterRole without servicecidrs) is
// not taken for an old server: the first view waits, and the error is
// logged.
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/cluster"
)

// Source publishes an API server's view of the cluster to a store.
type Source struct {
	// Config is how to reach the API server (see ClientConfig.RESTConfig).
	Config *rest.Config
	// NodeName is the node to watch, for a node-local view; empty watches
	// every node (fan-out).
	NodeName string
	// ServiceProxyName also watches the Services labelled
	// service.kubernetes.io/service-proxy-name with this value; unlabelled
	// Services are always watched.
	ServiceProxyName string
	// StatsInterval is how often the event and revision counters are
	// logged (at -v=1) when they moved; zero means 30 seconds.
	StatsInterval time.Duration

	mu     sync.Mutex
	conn   *conn
	synced bool
}

// Status is what a Source knows of its connection to the API server.
type Status struct {
	// Synced: every informer delivered its initial list and the store was
	// marked synced.
	Synced bool
	// Reachable is false from the first failed request to the first
	// successful one.
	Reachable bool
	// Outages counts the times contact was lost.
	Outages int
	// FailedRequests counts the failed requests of the current outage.
	FailedRequests int
}

// Status returns the source's current status.
func (s *Source) Status() Status {
	s.mu.Lock()
	c, synced := s.conn, s.synced
	s.mu.Unlock()
	if c == nil {
		return Status{}
	}
	down, outages, failures := c.state()
	return Status{Synced: synced, Reachable: !down, Outages: outages, FailedRequests: failures}
}

const defaultStatsInterval = 30 * time.Second

// Run watches the API server and keeps store up to date until ctx ends. It
// returns an error only for a configuration it cannot use; an unreachable
// API server is retried, with backoff, for as long as it takes.
func (s *Source) Run(ctx context.Context, store *cluster.Store) error {
	logger := klog.FromContext(ctx)
	if s.Config == nil {
		return fmt.Errorf("kube source: no client config")
	}
	serviceSel, err := serviceSelector(s.ServiceProxyName)
	if err != nil {
		return err
	}
	c := newConn(logger)
	s.mu.Lock()
	s.conn, s.synced = c, false
	s.mu.Unlock()
	config := rest.CopyConfig(s.Config)
	config.Wrap(c.wrap)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}

	w := &writer{store: store, logger: logger}
	var informers []*informer
	add := func(inf *informer) { informers = append(informers, inf) }

	services := newInformer("services", coreinformers.NewFilteredServiceInformer(
		client, metav1.NamespaceAll, 0, cache.Indexers{}, serviceSel.tweak))
	services.transform = convertWith(convertService(s.ServiceProxyName))
	services.handler = handler(w, func(tx *cluster.Tx, ns, name string) { tx.DeleteService(ns, name) })
	add(services)

	slices := newInformer("endpointslices", discoveryinformers.NewFilteredEndpointSliceInformer(
		client, metav1.NamespaceAll, 0, cache.Indexers{}, endpointSliceSelector().tweak))
	slices.transform = convertWith(convertEndpointSlice)
	slices.handler = handler(w, func(tx *cluster.Tx, ns, name string) { tx.DeleteEndpointSlice(ns, name) })
	add(slices)

	nodes := newInformer("nodes", coreinformers.NewFilteredNodeInformer(client, 0, cache.Indexers{}, nodeSelector(s.NodeName).tweak))
	nodes.transform = convertWith(convertNode)
	nodes.handler = handler(w, func(tx *cluster.Tx, _, name string) { tx.DeleteNode(name) })
	add(nodes)

	cidrs := newInformer("servicecidrs", networkinginformers.NewFilteredServiceCIDRInformer(client, 0, cache.Indexers{}, nil))
	cidrs.transform = convertWith(convertServiceCIDR)
	cidrs.handler = handler(w, func(tx *cluster.Tx, _, name string) { tx.DeleteServiceCIDR(name) })
	cidrs.unserved = make(chan struct{})
	add(cidrs)

	ctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() {
		cancel() // before waiting: Run may return before its ctx ends
		running.Wait()
	}()
	synced := map[*informer]cache.DoneChecker{}
	for _, inf := range informers {
		reg, err := inf.start(ctx, &running, c)
		if err != nil {
			return err
		}
		synced[inf] = reg.HasSyncedChecker()
	}

	began := time.Now()
	for _, inf := range informers {
		select {
		case <-synced[inf].Done():
		case <-inf.unserved: // nil, and never ready, but for ServiceCIDRs
		case <-ctx.Done():
			return nil
		}
	}
	store.MarkSynced()
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
	count := func(infs ...*informer) int {
		n := 0
		for _, inf := range infs {
			if inf != nil {
				n += len(inf.GetStore().ListKeys())
			}
		}
		return n
	}
	st := store.Stats()
	logger.Info("Synced with the API server", "took", time.Since(began).Round(time.Millisecond),
		"services", count(services), "endpointSlices", count(slices),
		"nodes", count(nodes), "serviceCIDRs", count(cidrs), "events", st.Events, "clusterRevision", st.Revision)
	if d := synced[cidrs].Done(); !isClosed(d) {
		running.Add(1)
		go func() {
			defer running.Done()
			select {
			case <-d:
				logger.Info("The API server serves ServiceCIDRs now; they are in the view", "serviceCIDRs", count(cidrs))
			case <-ctx.Done():
			}
		}()
	}

	s.logStats(ctx, logger, store)
	return nil
}

// logStats logs, at -v=1, the store's counters when they moved: events in
// (informer events written) vs revisions out (batches that changed
// something).
func (s *Source) logStats(ctx context.Context, logger klog.Logger, store *cluster.Store) {
	log := logger.V(1)
	if !log.Enabled() {
		<-ctx.Done()
		return
	}
	interval := s.StatsInterval
	if interval <= 0 {
		interval = defaultStatsInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := store.Stats()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if st := store.Stats(); st != last {
			log.Info("API events", "events", st.Events, "clusterRevision", st.Revision,
				"eventsSinceLast", st.Events-last.Events, "revisionsSinceLast", st.Revision-last.Revision)
			last = st
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// informer is one watch and what its events do to the store.
type informer struct {
	cache.SharedIndexInformer
	name string
	// transform converts API objects as they enter the informer (see
	// convertWith); handler writes them to the store.
	transform cache.TransformFunc
	handler   cache.ResourceEventHandler
	// unserved, when not nil, is closed the first time the API server
	// answers that it does not serve the resource (404): the first view
	// does not wait for an optional resource an older server lacks.
	unserved chan struct{}
}

func newInformer(name string, inf cache.SharedIndexInformer) *informer {
	return &informer{SharedIndexInformer: inf, name: name}
}

// start registers the handler and runs the informer until ctx ends.
func (inf *informer) start(ctx context.Context, running *sync.WaitGroup, c *conn) (cache.ResourceEventHandlerRegistration, error) {
	logger := klog.FromContext(ctx)
	if err := inf.SetTransform(inf.transform); err != nil {
		return nil, fmt.Errorf("%s: %w", inf.name, err)
	}
	var errs repeats
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		switch {
		case inf.unserved != nil && apierrors.IsNotFound(err):
			if !isClosed(inf.unserved) {
				logger.Info("The API server does not serve this resource (Kubernetes older than 1.33?); the view has none until it does",
					"resource", inf.name, "err", err)
				close(inf.unserved)
				return
			}
			logger.V(4).Info("Resource still not served; retrying", "resource", inf.name, "err", err)
		case quietWatchError(err) || c.isDown() || (refusal(err) && c.recentlyBack()):
			// The end of a watch, or an outage, or what a restarted
			// server refuses while it loads its roles or its storage:
			// c logs the outage once.
			logger.V(4).Info("Watch ended; retrying", "resource", inf.name, "err", err)
		case errs.first(err, time.Now()):
			logger.Error(err, "Watching the API server; retrying", "resource", inf.name)
		default:
			logger.V(4).Info("Watching the API server failed again; retrying", "resource", inf.name, "err", err)
		}
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", inf.name, err)
	}
	reg, err := inf.AddEventHandlerWithOptions(inf.handler, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", inf.name, err)
	}
	// client-go's own messages two levels down: at the default level it
	// says "watch ended with error" for every watch an outage breaks, which
	// c already reports once.
	runCtx := klog.NewContext(ctx, logger.V(2))
	running.Add(1)
	go func() {
		defer running.Done()
		inf.RunWithContext(runCtx)
	}()
	return reg, nil
}

// refusal reports whether err is an answer of the API server that refused
// the request rather than served it (see conn).
func refusal(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusTooManyRequests || code >= 500
}

// repeatEvery is how often an error that keeps coming back, the same, is
// logged again at the default level.
const repeatEvery = 10 * time.Minute

// repeats tells an error from the one before: a watch retries with backoff
// (up to about 30s), and a persistent error (403, say) logged at every
// retry would drown the log.
type repeats struct {
	mu     sync.Mutex
	last   string
	logged time.Time
}

// first reports whether err should be logged: it differs from the last
// error, or that one was logged repeatEvery ago.
func (r *repeats) first(err error, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg := err.Error(); msg != r.last || now.Sub(r.logged) >= repeatEvery {
		r.last, r.logged = msg, now
		return true
	}
	return false
}

// quietWatchError: the ends of a watch that are part of normal operation or
// of an outage (which the transport already reported).
func quietWatchError(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err) || utilnet.IsConnectionRefused(err) ||
		errors.Is(err, context.Canceled)
}

func (sel selector) tweak(o *metav1.ListOptions) {
	o.LabelSelector, o.FieldSelector = sel.label, sel.field
}
