// Package backend is the contract between kpng and a dataplane.
//
// A backend turns a node's resolved view (the services this node must
// implement, each with the endpoints it may use, already filtered by
// readiness, topology and traffic policy) into kernel state. It never talks
// to the API server and never re-derives a Kubernetes rule: everything it
// needs is in the [State] it is given.
//
// Two styles are offered, as KEP-2104 describes:
//
//   - full state ([Backend]): Sync is called with the whole view and the
//     list of services that changed since the previous call;
//   - incremental ([Incremental]): SetService, DeleteService, SetEndpoint,
//     DeleteEndpoint, then Sync; [FromIncremental] adapts it to a Backend.
//
// Either way the backend is driven by [Run], which is the same whether the
// view is computed in this process (kpng ... to-local to-X) or received over
// gRPC (kpng local --api ... to-X): a backend cannot tell which.
//
// A backend makes itself available as the command "to-<name>" by calling
// [Register] from an init function; see [Plugin].
//
// The package imports the view types (api/localv1) and the standard library
// only, so that a backend's module pulls neither client-go nor kpng's brain
// (deps_test.go checks it). It logs through log/slog ([Options].Logger).
// The in-process feed is package local; the gRPC one, package client.
package backend

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kpng/kpng/api/localv1"
)

// ServiceKey names one Service in one IP family: the unit of a node's view.
type ServiceKey struct {
	Namespace string
	Name      string
	Family    localv1.IPFamily
}

// KeyOf returns the key of a view entry.
func KeyOf(se *localv1.ServiceEndpoints) ServiceKey {
	return ServiceKey{Namespace: se.Service.Namespace, Name: se.Service.Name, Family: se.Service.Family}
}

func (k ServiceKey) String() string {
	f := "v4"
	if k.Family == localv1.IPFamily_IPV6 {
		f = "v6"
	}
	return k.Namespace + "/" + k.Name + "/" + f
}

// Compare orders keys by namespace, name, then family.
func (k ServiceKey) Compare(o ServiceKey) int {
	return cmp.Or(strings.Compare(k.Namespace, o.Namespace), strings.Compare(k.Name, o.Name), cmp.Compare(k.Family, o.Family))
}

// State is a node's complete view at one revision.
//
// The State passed to Sync is owned by the driver and changes after Sync
// returns: keep what you need, not the State. The ServiceEndpoints messages
// in it are never modified once published (a change publishes a new
// message), so keeping pointers to them is safe; they are read-only.
type State struct {
	// NodeName is the node the view is for.
	NodeName string
	// Revision moves only when the view's content changes.
	Revision uint64
	// Services is the view, by key.
	Services map[ServiceKey]*localv1.ServiceEndpoints
	// Node is this node's addresses, pod CIDRs and zone; nil while the Node
	// object is unknown.
	Node *localv1.Node
	// ServiceCIDRs are the ranges cluster IPs come from (sorted).
	ServiceCIDRs []string
}

// NewState returns an empty state for a node.
func NewState(node string) *State {
	return &State{NodeName: node, Services: map[ServiceKey]*localv1.ServiceEndpoints{}}
}

// Sorted returns the view's entries ordered by key, for output and tests.
func (s *State) Sorted() []*localv1.ServiceEndpoints {
	keys := slices.SortedFunc(maps.Keys(s.Services), ServiceKey.Compare)
	out := make([]*localv1.ServiceEndpoints, len(keys))
	for i, k := range keys {
		out[i] = s.Services[k]
	}
	return out
}

// Changes is what differs between the State of this Sync and the State of
// the previous successful one.
type Changes struct {
	// Reset: treat every entry as new and forget anything not in the state.
	// It is set on the first call, after a failed call (the backend may be
	// in any state), and when the feed itself restarted (a new brain).
	Reset bool
	// Resync: a periodic call (see Options.ResyncPeriod). Nothing may have
	// changed; a backend that can check the kernel against what it wrote
	// does so now and repairs what was changed behind its back.
	Resync bool
	// Set lists entries created or changed, Deleted entries gone. A key is
	// in at most one of them. Both are sorted.
	Set     []ServiceKey
	Deleted []ServiceKey
	// NodeChanged: State.Node or State.ServiceCIDRs changed.
	NodeChanged bool
}

// Empty reports whether nothing changed and nothing is asked.
func (c Changes) Empty() bool {
	return !c.Reset && !c.Resync && !c.NodeChanged && len(c.Set) == 0 && len(c.Deleted) == 0
}

func (c Changes) String() string {
	return fmt.Sprintf("reset=%v resync=%v node=%v set=%d deleted=%d", c.Reset, c.Resync, c.NodeChanged, len(c.Set), len(c.Deleted))
}

// Backend is a dataplane in the full-state style.
type Backend interface {
	// Sync makes the dataplane implement state. changes says what differs
	// from the state of the last call that returned nil; a backend that
	// rebuilds everything may ignore it. Sync must either apply the whole
	// state or leave the dataplane as it was (one atomic transaction, where
	// the kernel allows), and return an error in the second case: the driver
	// calls again later, with Changes.Reset set.
	//
	// Calls never overlap. While one runs, changes accumulate and arrive
	// coalesced in the next call, so a slow backend sees fewer, larger
	// batches, never a backlog.
	Sync(ctx context.Context, state *State, changes Changes) error
}

// Func adapts a function to Backend.
type Func func(ctx context.Context, state *State, changes Changes) error

// Sync implements Backend.
func (f Func) Sync(ctx context.Context, state *State, changes Changes) error {
	return f(ctx, state, changes)
}
