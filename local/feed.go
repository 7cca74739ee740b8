package backend

import (
	"context"
	"slices"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
)

// LocalFeed is the in-process Feed: it computes a node's view with the brain
// from a cluster store that a source fills (kpng <source> to-local ...).
type LocalFeed struct {
	store     *cluster.Store
	view      *brain.View
	state     *State
	rev       uint64 // store revision last looked at
	delivered bool   // the first view was delivered
}

// NewLocalFeed returns the feed of one node's view of store.
func NewLocalFeed(store *cluster.Store, opts brain.Options) *LocalFeed {
	return &LocalFeed{store: store, view: brain.NewView(opts), state: NewState(opts.NodeName)}
}

// View returns the brain view behind the feed, for its counters.
func (f *LocalFeed) View() *brain.View { return f.view }

// Next implements Feed.
func (f *LocalFeed) Next(ctx context.Context) (*State, Changes, error) {
	for {
		rev, err := f.store.Wait(ctx, f.rev)
		if err != nil {
			return nil, Changes{}, err
		}
		f.rev = rev
		var d brain.Diff
		f.store.View(func(r cluster.Reader) { d = f.view.Update(r) })
		if d.Empty() && f.delivered {
			continue
		}
		f.delivered = true // even an empty cluster is a view to deliver
		ch := Changes{NodeChanged: d.NodeChanged}
		f.state.Node, f.state.ServiceCIDRs = f.view.Node(), f.view.ServiceCIDRs()
		for _, se := range d.Set {
			k := KeyOf(se)
			f.state.Services[k] = se
			ch.Set = append(ch.Set, k)
		}
		for _, se := range d.Deleted {
			k := KeyOf(se)
			delete(f.state.Services, k)
			ch.Deleted = append(ch.Deleted, k)
		}
		slices.SortFunc(ch.Set, ServiceKey.Compare)
		slices.SortFunc(ch.Deleted, ServiceKey.Compare)
		f.state.Revision = f.view.Revision()
		if log := klog.FromContext(ctx).V(1); log.Enabled() {
			// The KEP's claim, measurable: API events in vs node revisions out.
			st, vs := f.store.Stats(), f.view.Stats()
			log.Info("Node view changed", "events", st.Events, "clusterRevision", st.Revision,
				"viewRevision", vs.Revision, "recomputed", vs.Recomputed, "set", len(ch.Set), "deleted", len(ch.Deleted))
		}
		return f.state, ch, nil
	}
}
