package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"google.golang.org/grpc"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// Batch is one batch of the localv1 stream as received, for WithOnBatch.
type Batch struct {
	// Reset: the batch is the whole view.
	Reset bool
	// Ops are the operations, without the Reset and the Sync.
	Ops []*localv1.Op
	// InstanceID and Revision are the batch's Sync.
	InstanceID uint64
	Revision   uint64
}

// WithOnBatch calls fn with every batch the feed receives, before it is
// applied (for logs, debugging and tests). fn must not keep or modify it.
func WithOnBatch(fn func(Batch)) Option { return func(o *options) { o.onBatch = fn } }

// Feed is a backend.Feed of a node's view received from a kpng server over
// the localv1 Watch API. It reconnects by itself and resumes where it was,
// so that after a short disconnection a backend it feeds receives only what
// changed. It receives a reset (Changes.Reset, and the whole view) when the
// server cannot give the change: the server restarted, the feed was away
// longer than the server keeps an unwatched node's view
// (server.Options.IdleViewTimeout and MaxNodeViews), or it fell behind the
// server's bounded history (server.Options.HistorySize).
//
// Delivery is paced by Next: the feed asks the server for a batch only when
// Next is called, and that batch then holds everything that changed since
// the previous one.
type Feed struct {
	conn  *grpc.ClientConn
	node  string
	o     options
	state *backend.State
	// instance is the server instance of the state's revision: with it,
	// the position a next batch must follow.
	instance uint64

	ctx     context.Context
	cancel  context.CancelFunc
	start   sync.Once
	want    chan position // asks for the batch after this position
	batches chan batch[*localv1.Op]
	done    chan struct{}
	err     error // set before done is closed
	asked   bool  // a batch was asked for and not yet received (Next's side)
}

// NewFeed returns the feed of nodeName's view from the server at target
// (see Dial). Close it when done.
func NewFeed(target, nodeName string, opts ...Option) (*Feed, error) {
	if nodeName == "" {
		return nil, errors.New("a node name is required")
	}
	o := buildOptions(opts)
	conn, err := dial(target, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Feed{
		conn: conn, node: nodeName, o: o, state: backend.NewState(nodeName),
		ctx: ctx, cancel: cancel,
		want: make(chan position), batches: make(chan batch[*localv1.Op]), done: make(chan struct{}),
	}, nil
}

// Close stops the feed and closes its connection.
func (f *Feed) Close() error {
	f.cancel()
	return f.conn.Close()
}

// Next implements backend.Feed.
func (f *Feed) Next(ctx context.Context) (*backend.State, backend.Changes, error) {
	// The stream lives as long as the feed.
	f.start.Do(func() { go f.receive(f.ctx) })
	for {
		if !f.asked {
			select {
			case f.want <- position{f.instance, f.state.Revision}:
				f.asked = true
			case <-ctx.Done():
				return nil, backend.Changes{}, ctx.Err()
			case <-f.done:
				return nil, backend.Changes{}, f.err
			}
		}
		var b batch[*localv1.Op]
		select {
		case b = <-f.batches:
			f.asked = false
		case <-ctx.Done():
			return nil, backend.Changes{}, ctx.Err() // the batch will wait for the next call
		case <-f.done:
			return nil, backend.Changes{}, f.err
		}
		if f.o.onBatch != nil {
			f.o.onBatch(Batch{Reset: b.reset, Ops: b.ops, InstanceID: b.instance, Revision: b.revision})
		}
		ch, err := f.apply(b)
		if err != nil {
			return nil, backend.Changes{}, err
		}
		if !ch.Empty() {
			return f.state, ch, nil
		}
		// Changed and changed back on the server: nothing to deliver.
	}
}

// receive runs the session: one batch per want, handed over on batches.
func (f *Feed) receive(ctx context.Context) {
	defer close(f.done)
	client := localv1.NewWatchClient(f.conn)
	s := &session[*localv1.Op]{o: f.o, name: "localv1", proto: protocol[*localv1.Op]{
		open: func(ctx context.Context, instance, revision uint64) (*stream[*localv1.Op], error) {
			sctx, cancel := context.WithCancel(ctx)
			st, err := client.Watch(sctx)
			if err == nil {
				err = st.Send(&localv1.WatchRequest{NodeName: f.node, ServiceProxyName: f.o.serviceProxyName, InstanceId: instance, Revision: revision})
			}
			if err != nil {
				cancel()
				return nil, err
			}
			return &stream[*localv1.Op]{
				ask: func(instance, revision uint64) error {
					return st.Send(&localv1.WatchRequest{InstanceId: instance, Revision: revision})
				},
				recv: func() ([]*localv1.Op, error) {
					m, err := st.Recv()
					return m.GetOps(), err
				},
				cancel: cancel,
			}, nil
		},
		sync: func(op *localv1.Op) (uint64, uint64, bool) {
			s := op.GetSync()
			return s.GetInstanceId(), s.GetRevision(), s != nil
		},
		isReset: func(op *localv1.Op) bool { return op.GetReset_() != nil },
	}}
	defer s.close()
	for {
		select {
		case p := <-f.want:
			// The last batch handed over may not have been applied.
			s.applied(p.instance, p.revision)
		case <-ctx.Done():
			f.err = errors.New("feed closed")
			return
		}
		b, err := s.next(ctx)
		if err != nil {
			f.err = err
			if ctx.Err() != nil {
				f.err = errors.New("feed closed")
			}
			return
		}
		select {
		case f.batches <- b:
		case <-ctx.Done():
			f.err = errors.New("feed closed")
			return
		}
	}
}

// entry is a view entry being changed by a batch: a copy, so that the
// published message is never modified.
type entry struct {
	se  *localv1.ServiceEndpoints
	eps map[endpointKey]*localv1.Endpoint // nil until an endpoint changes
}

type endpointKey struct {
	portName string
	protocol localv1.Protocol
	ip       string
	port     int32
}

func keyOfEndpoint(ep *localv1.Endpoint) endpointKey {
	return endpointKey{ep.PortName, ep.Protocol, ep.Ip, ep.Port}
}

func keyOf(k *localv1.ServiceKey) backend.ServiceKey {
	return backend.ServiceKey{Namespace: k.GetNamespace(), Name: k.GetName(), Family: k.GetFamily()}
}

// apply applies a batch to the state and returns what changed. It is all
// or nothing: the batch is first checked and turned into new entries on the
// side (a copy of each entry it touches, never of the whole state), and the
// state changes only once the whole batch is known to be valid.
func (f *Feed) apply(b batch[*localv1.Op]) (backend.Changes, error) {
	var ch backend.Changes
	st := f.state
	base := st.Services // what the batch changes; a reset starts from nothing
	if b.reset {
		base = nil
	}
	var (
		node    *localv1.Node
		cidrs   []string
		nodeSet bool
		touched = map[backend.ServiceKey]*entry{}
		deleted = map[backend.ServiceKey]bool{}
	)
	get := func(k backend.ServiceKey) *entry {
		if e := touched[k]; e != nil {
			return e
		}
		e := &entry{se: &localv1.ServiceEndpoints{}}
		if old := base[k]; old != nil {
			e.se.Service, e.se.Endpoints, e.se.TriggerTimeUnixNano = old.Service, old.Endpoints, old.TriggerTimeUnixNano
		}
		touched[k] = e
		delete(deleted, k)
		return e
	}
	endpoints := func(e *entry) map[endpointKey]*localv1.Endpoint {
		if e.eps == nil {
			e.eps = make(map[endpointKey]*localv1.Endpoint, len(e.se.Endpoints)+1)
			for _, ep := range e.se.Endpoints {
				e.eps[keyOfEndpoint(ep)] = ep
			}
		}
		return e.eps
	}
	for _, op := range b.ops {
		switch o := op.Op.(type) {
		case *localv1.Op_SetService:
			svc := o.SetService
			if svc == nil {
				return backend.Changes{}, errors.New("protocol error: set_service without a service")
			}
			get(backend.ServiceKey{Namespace: svc.Namespace, Name: svc.Name, Family: svc.Family}).se.Service = svc
		case *localv1.Op_DeleteService:
			k := keyOf(o.DeleteService)
			delete(touched, k)
			if _, ok := base[k]; ok {
				deleted[k] = true
			}
		case *localv1.Op_SetEndpoint:
			ep := o.SetEndpoint.GetEndpoint()
			if ep == nil {
				return backend.Changes{}, errors.New("protocol error: set_endpoint without an endpoint")
			}
			endpoints(get(keyOf(o.SetEndpoint.GetKey())))[keyOfEndpoint(ep)] = ep
		case *localv1.Op_DeleteEndpoint:
			ep := o.DeleteEndpoint.GetEndpoint()
			if ep == nil {
				return backend.Changes{}, errors.New("protocol error: delete_endpoint without an endpoint")
			}
			delete(endpoints(get(keyOf(o.DeleteEndpoint.GetKey()))), keyOfEndpoint(ep))
		case *localv1.Op_SetTriggerTime:
			get(keyOf(o.SetTriggerTime.GetKey())).se.TriggerTimeUnixNano = o.SetTriggerTime.GetUnixNano()
		case *localv1.Op_SetNode:
			node, cidrs, nodeSet = o.SetNode.GetNode(), o.SetNode.GetServiceCidrs(), true
		default:
			return backend.Changes{}, fmt.Errorf("protocol error: unexpected operation %T", op.Op)
		}
	}
	for k, e := range touched {
		if e.se.Service == nil {
			return backend.Changes{}, fmt.Errorf("protocol error: endpoints of %s, a service never set", k)
		}
	}

	// The batch is valid: commit it.
	if b.reset {
		ch.Reset, ch.NodeChanged = true, true
		clear(st.Services)
		st.Node, st.ServiceCIDRs = nil, nil
	}
	if nodeSet {
		st.Node, st.ServiceCIDRs = node, cidrs
		ch.NodeChanged = true
	}
	for k, e := range touched {
		if e.eps != nil {
			e.se.Endpoints = slices.SortedFunc(maps.Values(e.eps), localv1.CompareEndpoints)
		}
		st.Services[k] = e.se
		ch.Set = append(ch.Set, k)
	}
	for k := range deleted {
		delete(st.Services, k)
		ch.Deleted = append(ch.Deleted, k)
	}
	if b.reset {
		ch.Set = slices.Collect(maps.Keys(st.Services))
	}
	slices.SortFunc(ch.Set, backend.ServiceKey.Compare)
	slices.SortFunc(ch.Deleted, backend.ServiceKey.Compare)
	st.Revision = b.revision
	f.instance = b.instance
	return ch, nil
}
