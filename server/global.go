package server

import (
	"cmp"
	"context"
	"errors"
	"io"
	"strings"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/cluster"
)

// Kinds of cluster objects, in the order a batch lists them.
const (
	kindNode = iota
	kindServiceCIDR
	kindService
	kindEndpointSlice
)

// globalKey is a key of the cluster journal: one object.
type globalKey struct {
	kind      int
	namespace string
	name      string
}

func compareGlobalKeys(a, b globalKey) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
}

// splitKey splits a cluster store key "namespace/name".
func splitKey(key string) (string, string) {
	ns, name, _ := strings.Cut(key, "/")
	return ns, name
}

// clusterView mirrors the cluster store into a journal of objects, so that
// a stream can be sent exactly the objects that changed since its revision
// (the store's own log names changed Services, not which of their slices).
type clusterView struct {
	instance uint64
	j        *journal[globalKey, proto.Message]
}

// clusterJournal returns the cluster view, starting it on first use.
func (s *Server) clusterJournal() *clusterView {
	ctx := s.lifetime()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		s.cluster = &clusterView{instance: newInstanceID(), j: newJournal[globalKey, proto.Message](s.opts.HistorySize, compareGlobalKeys)}
		go s.cluster.run(ctx, s.store)
	}
	return s.cluster
}

// run copies every change of the store into the journal.
func (c *clusterView) run(ctx context.Context, store *cluster.Store) {
	var storeRev uint64
	owners := map[string]map[globalKey]bool{} // slices in the journal, by service key
	cidrs := map[globalKey]bool{}             // ServiceCIDRs in the journal
	for {
		if _, err := store.Wait(ctx, storeRev); err != nil {
			return
		}
		store.View(func(r cluster.Reader) {
			first := storeRev == 0
			full := first
			services, nodes, cidrsChanged := map[string]bool{}, map[string]bool{}, first
			if !first {
				full = !r.ChangesSince(storeRev, func(ch cluster.Change) {
					switch ch.Kind {
					case cluster.ServiceChanged:
						services[ch.Key] = true
					case cluster.NodeChanged:
						nodes[ch.Key] = true
					case cluster.ServiceCIDRChanged:
						cidrsChanged = true
					}
				})
			}
			storeRev = r.Revision()
			c.j.update(first, func(set func(globalKey, proto.Message)) {
				if full {
					cidrsChanged = true
					r.ServiceKeys(func(k string) { services[k] = true })
					for k := range owners {
						services[k] = true
					}
					r.Nodes(func(n *globalv1.Node) { nodes[n.Name] = true })
					c.j.keys(func(k globalKey) {
						switch k.kind {
						case kindService:
							services[cluster.Key(k.namespace, k.name)] = true
						case kindNode:
							nodes[k.name] = true
						}
					})
				}
				for name := range nodes {
					k := globalKey{kind: kindNode, name: name}
					if n := r.Node(name); n != nil {
						set(k, n)
					} else {
						set(k, nil)
					}
				}
				if cidrsChanged {
					present := map[globalKey]bool{}
					r.ServiceCIDRs(func(sc *globalv1.ServiceCIDR) {
						k := globalKey{kind: kindServiceCIDR, name: sc.Name}
						present[k] = true
						set(k, sc)
					})
					for k := range cidrs {
						if !present[k] {
							set(k, nil)
						}
					}
					cidrs = present
				}
				// A slice whose Service label changed leaves one service and
				// joins another in the same revision: delete what left only
				// after every service has set what it holds.
				setNow := map[globalKey]bool{}
				var gone []globalKey
				for key := range services {
					ns, name := splitKey(key)
					k := globalKey{kind: kindService, namespace: ns, name: name}
					if svc := r.Service(key); svc != nil {
						set(k, svc)
					} else {
						set(k, nil)
					}
					present := map[globalKey]bool{}
					for _, sl := range r.EndpointSlices(key) {
						sk := globalKey{kind: kindEndpointSlice, namespace: sl.Namespace, name: sl.Name}
						present[sk] = true
						setNow[sk] = true
						set(sk, sl)
					}
					for sk := range owners[key] {
						if !present[sk] {
							gone = append(gone, sk)
						}
					}
					if len(present) == 0 {
						delete(owners, key)
					} else {
						owners[key] = present
					}
				}
				for _, sk := range gone {
					if !setNow[sk] {
						set(sk, nil)
					}
				}
			})
		})
	}
}

type globalService struct {
	globalv1.UnimplementedWatchServer
	s *Server
}

// Watch implements globalv1.WatchServer.
func (g globalService) Watch(stream globalv1.Watch_WatchServer) error {
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	c := g.s.clusterJournal()
	log := klog.FromContext(ctx).WithValues("api", "globalv1")
	var from uint64
	if req.InstanceId == c.instance {
		from = req.Revision
	}
	out := &chunker[*globalv1.Op]{ops: g.s.opts.ChunkSize, bytes: g.s.opts.ChunkBytes, send: func(ops []*globalv1.Op) error {
		return stream.Send(&globalv1.Ops{Ops: ops})
	}}
	for {
		if _, err := c.j.wait(ctx, from); err != nil {
			return status.FromContextError(err).Err()
		}
		items, rev, reset := c.j.since(from)
		if reset {
			if err := out.add(&globalv1.Op{Op: &globalv1.Op_Reset_{Reset_: &globalv1.Reset{}}}); err != nil {
				return err
			}
		}
		for _, it := range items {
			if err := out.add(globalOp(it)); err != nil {
				return err
			}
		}
		if err := out.add(&globalv1.Op{Op: &globalv1.Op_Sync{Sync: &globalv1.Sync{InstanceId: c.instance, Revision: rev}}}); err != nil {
			return err
		}
		if err := out.flush(); err != nil {
			return err
		}
		log.V(3).Info("Sent a batch", "from", from, "revision", rev, "reset", reset, "objects", len(items))
		from = rev
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// globalOp is the operation that turns it.old into it.cur.
func globalOp(it item[globalKey, proto.Message]) *globalv1.Op {
	if it.cur == nil {
		key := &globalv1.ObjectKey{Namespace: it.key.namespace, Name: it.key.name}
		switch it.key.kind {
		case kindService:
			return &globalv1.Op{Op: &globalv1.Op_DeleteService{DeleteService: key}}
		case kindEndpointSlice:
			return &globalv1.Op{Op: &globalv1.Op_DeleteEndpointSlice{DeleteEndpointSlice: key}}
		case kindNode:
			return &globalv1.Op{Op: &globalv1.Op_DeleteNode{DeleteNode: key}}
		default:
			return &globalv1.Op{Op: &globalv1.Op_DeleteServiceCidr{DeleteServiceCidr: key}}
		}
	}
	switch m := it.cur.(type) {
	case *globalv1.Service:
		return &globalv1.Op{Op: &globalv1.Op_SetService{SetService: m}}
	case *globalv1.EndpointSlice:
		return &globalv1.Op{Op: &globalv1.Op_SetEndpointSlice{SetEndpointSlice: m}}
	case *globalv1.Node:
		return &globalv1.Op{Op: &globalv1.Op_SetNode{SetNode: m}}
	default:
		return &globalv1.Op{Op: &globalv1.Op_SetServiceCidr{SetServiceCidr: it.cur.(*globalv1.ServiceCIDR)}}
	}
}
