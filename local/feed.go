// Package local computes a node's view in this process: its Feed runs the
// brain over a cluster store that a source fills, and hands the result to
// backend.Run (kpng <source> ... to-local to-<backend>).
//
// It is the in-process half of the backend contract; the gRPC half is
// package client. Package backend itself knows neither, so that a backend
// author's module does not depend on the brain or on Kubernetes' types.
package local

import (
	"context"
	"slices"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
)

// Feed is the in-process backend.Feed: it computes a node's view with the
// brain from a cluster store.
type Feed struct {
	store     *cluster.Store
	view      *brain.View
	state     *backend.State
	rev       uint64 // store revision last looked at
	delivered bool   // the first view was delivered
}

// NewFeed returns the feed of one node's view of store.
func NewFeed(store *cluster.Store, opts brain.Options) *Feed {
	return &Feed{store: store, view: brain.NewView(opts), state: backend.NewState(opts.NodeName)}
}

// View returns the brain view behind the feed, for its counters.
func (f *Feed) View() *brain.View { return f.view }

// Next implements backend.Feed.
func (f *Feed) Next(ctx context.Context) (*backend.State, backend.Changes, error) {
	for {
		rev, err := f.store.Wait(ctx, f.rev)
		if err != nil {
			return nil, backend.Changes{}, err
		}
		f.rev = rev
		var d brain.Diff
		var seen uint64 // the revision the view was computed at (rev or later)
		f.store.View(func(r cluster.Reader) { d, seen = f.view.Update(r), r.Revision() })
		if d.Empty() && f.delivered {
			// Said too, so that a writer of the cluster state can tell its
			// change is in the dataplane when it left this node's view as
			// it was (see source/file's "Loaded" line).
			klog.FromContext(ctx).V(2).Info("Node view unchanged", "clusterRevision", seen, "viewRevision", f.view.Revision())
			continue
		}
		f.delivered = true // even an empty cluster is a view to deliver
		ch := backend.Changes{NodeChanged: d.NodeChanged}
		f.state.Node, f.state.ServiceCIDRs = f.view.Node(), f.view.ServiceCIDRs()
		for _, se := range d.Set {
			k := backend.KeyOf(se)
			f.state.Services[k] = se
			ch.Set = append(ch.Set, k)
		}
		for _, se := range d.Deleted {
			k := backend.KeyOf(se)
			delete(f.state.Services, k)
			ch.Deleted = append(ch.Deleted, k)
		}
		slices.SortFunc(ch.Set, backend.ServiceKey.Compare)
		slices.SortFunc(ch.Deleted, backend.ServiceKey.Compare)
		f.state.Revision = f.view.Revision()
		if log := klog.FromContext(ctx).V(1); log.Enabled() {
			// The KEP's claim, measurable: API events in vs node revisions out.
			st, vs := f.store.Stats(), f.view.Stats()
			log.Info("Node view changed", "events", st.Events, "clusterRevision", seen,
				"viewRevision", vs.Revision, "recomputed", vs.Recomputed, "set", len(ch.Set), "deleted", len(ch.Deleted))
		}
		return f.state, ch, nil
	}
}
