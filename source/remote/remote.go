// Package remote is the source of cluster state read from another kpng over
// the globalv1 Watch API: one process watches the API server and serves the
// cluster to many node agents (`kpng api --api ... to-local ...`), each of
// which runs the brain for its own node. Tiers can chain: a node agent can
// itself serve the cluster (`to-api`).
package remote

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/client/clusterwatch"
	"github.com/kpng/kpng/cluster"
)

// Source copies the cluster state of a kpng server into a store.
type Source struct {
	// Target is the server's address (see client.Dial).
	Target string
	// Options secure the connection and tune reconnection.
	Options []client.Option

	// Keys of what the store holds from this source, to drop what a reset
	// leaves out.
	services, slices, nodes, cidrs map[string]bool
}

// Run fills store until ctx ends. The store is marked synced after the
// first complete state; then every batch is one atomic update of the store.
// A lost connection is retried and resumed; in the meantime the store keeps
// the last state received.
func (s *Source) Run(ctx context.Context, store *cluster.Store) error {
	conn, err := client.Dial(s.Target, s.Options...)
	if err != nil {
		return err
	}
	defer conn.Close()
	s.services, s.slices, s.nodes, s.cidrs = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	logger := klog.FromContext(ctx).WithValues("api", s.Target)
	synced := false
	return clusterwatch.Watch(ctx, conn, func(b clusterwatch.Batch) error {
		if err := s.apply(store, b); err != nil {
			return err
		}
		if !synced {
			synced = true
			store.MarkSynced()
			logger.Info("Cluster state received", "services", len(s.services), "endpointSlices", len(s.slices), "nodes", len(s.nodes))
		}
		logger.V(3).Info("Applied a batch", "reset", b.Reset, "ops", len(b.Ops), "revision", b.Revision)
		return nil
	}, s.Options...)
}

// apply applies a batch to the store, all or nothing: it is checked first,
// since a store update cannot be rolled back.
func (s *Source) apply(store *cluster.Store, b clusterwatch.Batch) error {
	for i, op := range b.Ops {
		if err := check(op); err != nil {
			return fmt.Errorf("protocol error: operation %d of the batch: %w", i, err)
		}
	}
	store.Update(func(tx *cluster.Tx) {
		// On a reset, whatever the batch does not set is gone.
		var stale struct{ services, slices, nodes, cidrs map[string]bool }
		if b.Reset {
			stale.services, stale.slices, stale.nodes, stale.cidrs = s.services, s.slices, s.nodes, s.cidrs
			s.services, s.slices, s.nodes, s.cidrs = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		}
		for _, op := range b.Ops {
			switch o := op.Op.(type) {
			case *globalv1.Op_SetService:
				tx.SetService(o.SetService)
				s.services[cluster.Key(o.SetService.Namespace, o.SetService.Name)] = true
			case *globalv1.Op_DeleteService:
				tx.DeleteService(o.DeleteService.Namespace, o.DeleteService.Name)
				delete(s.services, cluster.Key(o.DeleteService.Namespace, o.DeleteService.Name))
			case *globalv1.Op_SetEndpointSlice:
				tx.SetEndpointSlice(o.SetEndpointSlice)
				s.slices[cluster.Key(o.SetEndpointSlice.Namespace, o.SetEndpointSlice.Name)] = true
			case *globalv1.Op_DeleteEndpointSlice:
				tx.DeleteEndpointSlice(o.DeleteEndpointSlice.Namespace, o.DeleteEndpointSlice.Name)
				delete(s.slices, cluster.Key(o.DeleteEndpointSlice.Namespace, o.DeleteEndpointSlice.Name))
			case *globalv1.Op_SetNode:
				tx.SetNode(o.SetNode)
				s.nodes[o.SetNode.Name] = true
			case *globalv1.Op_DeleteNode:
				tx.DeleteNode(o.DeleteNode.Name)
				delete(s.nodes, o.DeleteNode.Name)
			case *globalv1.Op_SetServiceCidr:
				tx.SetServiceCIDR(o.SetServiceCidr)
				s.cidrs[o.SetServiceCidr.Name] = true
			case *globalv1.Op_DeleteServiceCidr:
				tx.DeleteServiceCIDR(o.DeleteServiceCidr.Name)
				delete(s.cidrs, o.DeleteServiceCidr.Name)
			}
		}
		for k := range stale.services {
			if !s.services[k] {
				ns, name := split(k)
				tx.DeleteService(ns, name)
			}
		}
		for k := range stale.slices {
			if !s.slices[k] {
				ns, name := split(k)
				tx.DeleteEndpointSlice(ns, name)
			}
		}
		for k := range stale.nodes {
			if !s.nodes[k] {
				tx.DeleteNode(k)
			}
		}
		for k := range stale.cidrs {
			if !s.cidrs[k] {
				tx.DeleteServiceCIDR(k)
			}
		}
	})
	return nil
}

// check reports what makes an operation one the store cannot apply.
func check(op *globalv1.Op) error {
	var missing bool
	switch o := op.GetOp().(type) {
	case *globalv1.Op_SetService:
		missing = o.SetService == nil
	case *globalv1.Op_DeleteService:
		missing = o.DeleteService == nil
	case *globalv1.Op_SetEndpointSlice:
		missing = o.SetEndpointSlice == nil
	case *globalv1.Op_DeleteEndpointSlice:
		missing = o.DeleteEndpointSlice == nil
	case *globalv1.Op_SetNode:
		missing = o.SetNode == nil
	case *globalv1.Op_DeleteNode:
		missing = o.DeleteNode == nil
	case *globalv1.Op_SetServiceCidr:
		missing = o.SetServiceCidr == nil
	case *globalv1.Op_DeleteServiceCidr:
		missing = o.DeleteServiceCidr == nil
	default:
		return fmt.Errorf("unexpected operation %T", op.GetOp())
	}
	if missing {
		return fmt.Errorf("%T without its object", op.GetOp())
	}
	return nil
}

func split(key string) (string, string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}
