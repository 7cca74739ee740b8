package brain

import (
	"cmp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/cluster"
)

// View is one node's view of its services, kept up to date from a
// cluster.Store at a cost proportional to what changed: a changed Service or
// EndpointSlice recomputes that Service only; a change to this node's zone
// recomputes everything (topology depends on it).
type View struct {
	opts     Options
	node     Node
	storeRev uint64
	rev      uint64
	services map[string][]*localv1.ServiceEndpoints // by service key, per family
	nodeInfo *localv1.Node                          // nil until the Node is known
	cidrs    []string                               // service CIDRs
	stats    ViewStats
}

// ViewStats are a view's counters.
type ViewStats struct {
	// Revision is the view's revision: the number of updates that changed it.
	Revision uint64
	// Recomputed counts the Services recomputed, over all updates.
	Recomputed uint64
	// FullRecomputes counts the updates that had to recompute every Service.
	FullRecomputes uint64
}

// Diff is what an update changed: entries set (new or different) and
// entries gone. Each entry is one Service in one IP family.
type Diff struct {
	Set     []*localv1.ServiceEndpoints
	Deleted []*localv1.ServiceEndpoints // the last value of each deleted entry
	// NodeChanged: this node's addresses, pod CIDRs or zone, or the
	// service CIDRs, changed (see View.Node and View.ServiceCIDRs).
	NodeChanged bool
}

// Empty reports whether the diff changes nothing.
func (d Diff) Empty() bool { return len(d.Set) == 0 && len(d.Deleted) == 0 && !d.NodeChanged }

// NewView returns an empty view for a node.
func NewView(opts Options) *View {
	return &View{
		opts:     opts,
		node:     Node{Name: opts.NodeName},
		services: map[string][]*localv1.ServiceEndpoints{},
	}
}

// Update brings the view up to the store's content (read through r) and
// returns what changed. Before the store is synced it does nothing.
func (v *View) Update(r cluster.Reader) Diff {
	if !r.Synced() || r.Revision() == v.storeRev {
		return Diff{}
	}
	full := v.storeRev == 0
	nodeDirty := full
	dirty := map[string]bool{}
	if !full {
		complete := r.ChangesSince(v.storeRev, func(c cluster.Change) {
			switch c.Kind {
			case cluster.ServiceChanged:
				dirty[c.Key] = true
			case cluster.NodeChanged:
				if c.Key == v.opts.NodeName {
					nodeDirty = true
					if NodeFrom(v.opts.NodeName, r.Node(c.Key)) != v.node && !mutated("zone-change-not-recomputed") {
						full = true
					}
				}
			case cluster.ServiceCIDRChanged:
				nodeDirty = true
			}
		})
		full = full || !complete
		nodeDirty = nodeDirty || !complete
	}
	v.storeRev = r.Revision()
	v.node = NodeFrom(v.opts.NodeName, r.Node(v.opts.NodeName))

	if full {
		v.stats.FullRecomputes++
		for k := range v.services {
			dirty[k] = true
		}
		r.ServiceKeys(func(k string) { dirty[k] = true })
	}
	var diff Diff
	if nodeDirty {
		diff.NodeChanged = v.updateNode(r)
	}
	for key := range dirty {
		v.stats.Recomputed++
		v.recompute(r, key, &diff)
	}
	if !diff.Empty() {
		v.rev++
		v.stats.Revision = v.rev
	}
	return diff
}

// updateNode refreshes the node facts and service CIDRs, and reports
// whether they changed.
func (v *View) updateNode(r cluster.Reader) bool {
	var info *localv1.Node
	if n := r.Node(v.opts.NodeName); n != nil {
		info = &localv1.Node{Name: n.Name, Zone: n.Zone, Addresses: n.Addresses, PodCidrs: n.PodCidrs}
	}
	var cidrs []string
	r.ServiceCIDRs(func(c *globalv1.ServiceCIDR) { cidrs = append(cidrs, c.Cidrs...) })
	slices.Sort(cidrs)
	cidrs = slices.Compact(cidrs)
	changed := !proto.Equal(info, v.nodeInfo) || !slices.Equal(cidrs, v.cidrs)
	v.nodeInfo, v.cidrs = info, cidrs
	return changed
}

// Node returns this node's facts, or nil while the Node is unknown. The
// message is shared: treat it as read-only.
func (v *View) Node() *localv1.Node { return v.nodeInfo }

// ServiceCIDRs returns the service CIDRs (sorted, shared: read-only).
func (v *View) ServiceCIDRs() []string { return v.cidrs }

func (v *View) recompute(r cluster.Reader, key string, diff *Diff) {
	var next []*localv1.ServiceEndpoints
	if svc := r.Service(key); svc != nil {
		next = ServiceView(svc, r.EndpointSlices(key), v.node, v.opts)
	}
	prev := v.services[key]
	for i, n := range next {
		if p := findFamily(prev, n.Service.Family); p == nil || !SameContent(p, n) {
			diff.Set = append(diff.Set, n)
		} else {
			next[i] = p // unchanged: keep the published message (and its trigger time)
		}
	}
	for _, p := range prev {
		if findFamily(next, p.Service.Family) == nil {
			diff.Deleted = append(diff.Deleted, p)
		}
	}
	if len(next) == 0 {
		delete(v.services, key)
	} else {
		v.services[key] = next
	}
}

// SameContent reports whether two entries are equal in everything but their
// trigger time, which alone is never a change.
func SameContent(a, b *localv1.ServiceEndpoints) bool {
	if a.TriggerTimeUnixNano == b.TriggerTimeUnixNano {
		return proto.Equal(a, b)
	}
	return proto.Equal(a.Service, b.Service) && slices.EqualFunc(a.Endpoints, b.Endpoints,
		func(x, y *localv1.Endpoint) bool { return proto.Equal(x, y) })
}

func findFamily(list []*localv1.ServiceEndpoints, f localv1.IPFamily) *localv1.ServiceEndpoints {
	for _, se := range list {
		if se.Service.Family == f {
			return se
		}
	}
	return nil
}

// Revision is the view's revision: it moves only when the content changes.
func (v *View) Revision() uint64 { return v.rev }

// Stats returns the view's counters.
func (v *View) Stats() ViewStats { return v.stats }

// State returns the whole view, sorted by namespace, name and family. The
// messages are shared with the view: treat them as read-only.
func (v *View) State() *localv1.NodeState {
	st := &localv1.NodeState{NodeName: v.opts.NodeName, Revision: v.rev, Node: v.nodeInfo, ServiceCidrs: v.cidrs}
	for _, list := range v.services {
		st.Services = append(st.Services, list...)
	}
	slices.SortFunc(st.Services, CompareServiceEndpoints)
	return st
}

// CompareServiceEndpoints orders entries by namespace, name, then family.
func CompareServiceEndpoints(a, b *localv1.ServiceEndpoints) int {
	return cmp.Or(
		strings.Compare(a.Service.Namespace, b.Service.Namespace),
		strings.Compare(a.Service.Name, b.Service.Name),
		cmp.Compare(a.Service.Family, b.Service.Family),
	)
}
