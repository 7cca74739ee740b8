//go:build integration

package kube

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
	"github.com/kpng/kpng/source/kube"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// waitTimeout bounds every wait for the view to reach a state. It is a
// deadline for failing, not a measure: a healthy run takes milliseconds.
const waitTimeout = 60 * time.Second

// harness runs the kube source against a test API server and records every
// view a backend would be handed (local.Feed), as a backend sees it.
type harness struct {
	t      *testing.T
	src    *kube.Source
	store  *cluster.Store
	logger klog.Logger

	mu         sync.Mutex
	deliveries []delivery
	changed    chan struct{} // closed and replaced at each delivery
}

// delivery is one view handed to the backend.
type delivery struct {
	Revision uint64
	Changes  backend.Changes
	Services map[backend.ServiceKey]*localv1.ServiceEndpoints
	Node     *localv1.Node
	CIDRs    []string
}

// kpngKubeconfigs holds, for each test API server, a kubeconfig of kpng's
// ServiceAccount.
var kpngKubeconfigs sync.Map

// kpngKubeconfig returns a kubeconfig with the identity and permissions
// kpng has in a cluster: deploy/rbac.yaml's ServiceAccount, applied on
// first use.
func kpngKubeconfig(api *apiserver.Server) string {
	if path, ok := kpngKubeconfigs.Load(api); ok {
		return path.(string)
	}
	api.Apply("deploy/rbac.yaml")
	path := api.ServiceAccountKubeconfig("kube-system", "kpng")
	kpngKubeconfigs.Store(api, path)
	return path
}

// startSource starts the kube source for opts.NodeName, as kpng's
// ServiceAccount, with the client settings kpng uses by default
// (kube-proxy's QPS, burst and protobuf), and a feed of the node's view.
// Both stop when the test ends.
func startSource(t *testing.T, api *apiserver.Server, opts brain.Options) *harness {
	t.Helper()
	config, err := kube.ClientConfig{Kubeconfig: kpngKubeconfig(api), QPS: kube.DefaultQPS, Burst: kube.DefaultBurst,
		ContentType: kube.DefaultContentType}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	h := &harness{
		t:       t,
		src:     &kube.Source{Config: config, NodeName: opts.NodeName, ServiceProxyName: opts.ServiceProxyName},
		store:   cluster.NewStore(),
		logger:  logger,
		changed: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	srcDone, feedDone := make(chan error, 1), make(chan struct{})
	go func() { srcDone <- h.src.Run(ctx, h.store) }()
	go func() {
		defer close(feedDone)
		feed := local.NewFeed(h.store, opts)
		for {
			st, ch, err := feed.Next(ctx)
			if err != nil {
				return
			}
			h.record(delivery{Revision: st.Revision, Changes: ch, Services: maps.Clone(st.Services),
				Node: st.Node, CIDRs: slices.Clone(st.ServiceCIDRs)})
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-feedDone
		if err := <-srcDone; err != nil {
			t.Errorf("kube source: %v", err)
		}
	})
	return h
}

func (h *harness) record(d delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries = append(h.deliveries, d)
	close(h.changed)
	h.changed = make(chan struct{})
}

// all returns every delivery so far.
func (h *harness) all() []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.deliveries)
}

// waitFor waits until the latest view satisfies ok, and returns it.
func (h *harness) waitFor(what string, ok func(d delivery) bool) delivery {
	h.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		h.mu.Lock()
		ch := h.changed
		var last *delivery
		if n := len(h.deliveries); n > 0 {
			last = &h.deliveries[n-1]
		}
		h.mu.Unlock()
		if last != nil && ok(*last) {
			return *last
		}
		select {
		case <-ch:
		case <-deadline:
			if last == nil {
				h.t.Fatalf("%s: no view after %v (source status %+v)", what, waitTimeout, h.src.Status())
			}
			h.t.Fatalf("%s: not reached after %v; last view (revision %d):\n%s", what, waitTimeout, last.Revision, last)
		}
	}
}

// waitUntil polls cond (for facts that no delivery announces, such as the
// source's connection status) until it holds.
func (h *harness) waitUntil(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not reached after %v", what, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logged returns the messages the source logged at level 0 (errors and
// plain info), in order.
func (h *harness) logged() []string {
	var out []string
	for _, e := range h.logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Type == ktesting.LogError || e.Verbosity == 0 {
			out = append(out, string(e.Type)+" "+e.Message)
		}
	}
	return out
}

// stored reports whether the store holds a Service, and how many
// EndpointSlices it holds for that service key.
func (h *harness) stored(namespace, name string) (service bool, slices int) {
	h.store.View(func(r cluster.Reader) {
		key := cluster.Key(namespace, name)
		service = r.Service(key) != nil
		slices = len(r.EndpointSlices(key))
	})
	return service, slices
}

func key(name string, family localv1.IPFamily) backend.ServiceKey {
	return backend.ServiceKey{Namespace: "default", Name: name, Family: family}
}

var (
	v4 = localv1.IPFamily_IPV4
	v6 = localv1.IPFamily_IPV6
)

// keys lists the view's services, sorted.
func (d delivery) keys() []string {
	var out []string
	for k := range d.Services {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

// endpoints renders a service's endpoints one per line, sorted, with the
// flags a backend acts on.
func (d delivery) endpoints(k backend.ServiceKey) []string {
	se := d.Services[k]
	if se == nil {
		return nil
	}
	var out []string
	for _, e := range se.Endpoints {
		s := net.JoinHostPort(e.Ip, strconv.Itoa(int(e.Port))) + " " + e.NodeName
		for _, f := range []struct {
			on   bool
			name string
		}{
			{e.Ready, "ready"}, {e.Serving, "serving"}, {e.Terminating, "terminating"},
			{e.OnThisNode, "here"}, {e.InClusterSet, "cluster"}, {e.InLocalSet, "local"},
		} {
			if f.on {
				s += " " + f.name
			}
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (d delivery) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %v, service CIDRs %v\n", d.Node, d.CIDRs)
	for _, k := range slices.SortedFunc(maps.Keys(d.Services), backend.ServiceKey.Compare) {
		fmt.Fprintf(&b, "  %s\n", k)
		for _, e := range d.endpoints(k) {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	return b.String()
}

// changed renders what a delivery changed: "set a/b/v4" and "deleted ...".
func (d delivery) changed() []string {
	var out []string
	for _, k := range d.Changes.Set {
		out = append(out, "set "+k.String())
	}
	for _, k := range d.Changes.Deleted {
		out = append(out, "deleted "+k.String())
	}
	if d.Changes.NodeChanged {
		out = append(out, "node")
	}
	return out
}

// last returns the latest delivery.
func (h *harness) last() delivery {
	h.t.Helper()
	all := h.all()
	if len(all) == 0 {
		h.t.Fatal("no view yet")
	}
	return all[len(all)-1]
}

// expectNext waits for the view to satisfy ok after a change made at view
// revision prev, and checks that it took exactly one new revision (no
// flapping through intermediate states) whose change list is want.
func (h *harness) expectNext(what string, prev uint64, ok func(d delivery) bool, want ...string) delivery {
	h.t.Helper()
	d := h.waitFor(what, ok)
	if d.Revision != prev+1 {
		h.t.Errorf("%s: view revision %d -> %d, want one revision; views since:\n%s", what, prev, d.Revision, h.since(prev))
	}
	if got := d.changed(); !slices.Equal(got, want) {
		h.t.Errorf("%s: changed %q, want %q", what, got, want)
	}
	return d
}

// since renders the deliveries after revision rev.
func (h *harness) since(rev uint64) string {
	var b strings.Builder
	for _, d := range h.all() {
		if d.Revision > rev {
			fmt.Fprintf(&b, "revision %d, changed %q:\n%s", d.Revision, d.changed(), d)
		}
	}
	return b.String()
}
