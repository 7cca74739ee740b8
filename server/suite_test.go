package server_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
	"github.com/kpng/kpng/server"
)

// A backend test suite, written once and run in process (local.Feed) and over
// gRPC (client.Feed), in both styles: a backend cannot tell the transports
// apart, so the same assertions hold.

// runner runs a backend for node-0 of store until ctx ends.
type runner func(ctx context.Context, t *testing.T, store *cluster.Store, b backend.Backend) error

var transports = map[string]runner{
	"in process": func(ctx context.Context, _ *testing.T, store *cluster.Store, b backend.Backend) error {
		return backend.Run(ctx, local.NewFeed(store, brain.Options{NodeName: "node-0"}), b, backend.Options{})
	},
	"over gRPC": func(ctx context.Context, t *testing.T, store *cluster.Store, b backend.Backend) error {
		ts := serve(t, store, "unix", server.Options{}, server.ListenOptions{})
		return client.RunBackend(ctx, ts.addr, "node-0", b)
	},
}

// fullState is a full-state backend that keeps its own copy of the view
// from the changes alone (never re-reading what Changes did not name), so
// that wrong change lists show as a wrong copy.
type fullState struct {
	mu       sync.Mutex
	services map[backend.ServiceKey]*localv1.ServiceEndpoints
	node     *localv1.Node
	cidrs    []string
	synced   chan struct{}
}

func (f *fullState) Sync(_ context.Context, st *backend.State, ch backend.Changes) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch.Reset {
		f.services = maps.Clone(st.Services)
	}
	for _, k := range ch.Set {
		f.services[k] = st.Services[k]
	}
	for _, k := range ch.Deleted {
		delete(f.services, k)
	}
	if ch.Reset || ch.NodeChanged {
		f.node, f.cidrs = st.Node, slices.Clone(st.ServiceCIDRs)
	}
	select {
	case f.synced <- struct{}{}:
	default:
	}
	return nil
}

func (f *fullState) state() *backend.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &backend.State{Services: maps.Clone(f.services), Node: f.node, ServiceCIDRs: f.cidrs}
}

// incremental is an incremental backend rebuilding the view from its calls.
type incremental struct {
	mu       sync.Mutex
	services map[backend.ServiceKey]*localv1.Service
	eps      map[backend.ServiceKey]map[backend.EndpointKey]*localv1.Endpoint
	synced   chan struct{}
}

func (i *incremental) Reset() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.services = map[backend.ServiceKey]*localv1.Service{}
	i.eps = map[backend.ServiceKey]map[backend.EndpointKey]*localv1.Endpoint{}
}
func (i *incremental) SetService(svc *localv1.Service) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.services[backend.ServiceKey{Namespace: svc.Namespace, Name: svc.Name, Family: svc.Family}] = svc
}
func (i *incremental) DeleteService(k backend.ServiceKey) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.services, k)
	delete(i.eps, k)
}
func (i *incremental) SetEndpoint(k backend.ServiceKey, ep *localv1.Endpoint) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.eps[k] == nil {
		i.eps[k] = map[backend.EndpointKey]*localv1.Endpoint{}
	}
	i.eps[k][backend.EndpointKeyOf(ep)] = ep
}
func (i *incremental) DeleteEndpoint(k backend.ServiceKey, ep *localv1.Endpoint) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.eps[k], backend.EndpointKeyOf(ep))
}
func (i *incremental) Sync() error {
	select {
	case i.synced <- struct{}{}:
	default:
	}
	return nil
}

// matches compares with a state, endpoints as sets (trigger times aside:
// the incremental style does not carry them).
func (i *incremental) matches(want *backend.State) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if len(i.services) != len(want.Services) {
		return false
	}
	for k, se := range want.Services {
		if !proto.Equal(i.services[k], se.Service) || len(i.eps[k]) != len(se.Endpoints) {
			return false
		}
		for _, ep := range se.Endpoints {
			if !proto.Equal(i.eps[k][backend.EndpointKeyOf(ep)], ep) {
				return false
			}
		}
	}
	return true
}

// suite drives a backend through a cluster's life and checks, after each
// step, that it converges to exactly the brain's view.
func suite(t *testing.T, run runner, b backend.Backend, synced <-chan struct{}, matches func(*backend.State) bool) {
	store := newCluster(30, 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, t, store, b) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	converge := func(step string) {
		t.Helper()
		want := brainState(store, "node-0")
		guardCtx, stop := context.WithTimeout(context.Background(), guard)
		defer stop()
		for !matches(want) {
			select {
			case <-synced:
			case <-guardCtx.Done():
				t.Fatalf("%s: the backend never converged to the brain's view", step)
			}
		}
	}
	converge("initial state")
	for round := range 12 {
		churn(store, round)
		if round%4 == 3 {
			converge("churn")
		}
	}
	store.Update(func(tx *cluster.Tx) {
		for i := range 30 {
			tx.DeleteService("ns", service(i).Name)
		}
	})
	converge("services deleted")
}

func TestBackendSuite(t *testing.T) {
	for name, run := range transports {
		t.Run(name+"/full state", func(t *testing.T) {
			b := &fullState{synced: make(chan struct{}, 1)}
			suite(t, run, b, b.synced, func(want *backend.State) bool { return sameState(b.state(), want) })
		})
		t.Run(name+"/incremental", func(t *testing.T) {
			inc := &incremental{synced: make(chan struct{}, 1)}
			inc.Reset()
			suite(t, run, backend.FromIncremental(inc), inc.synced, inc.matches)
		})
	}
}
