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
	"github.com/kpng/kpng/client/internal/session"
)

// Batch is one batch of the localv1 stream as received, for WithOnBatch:
// Reset, the operations (without the Reset and the Sync), and the Sync's
// InstanceID and Revision.
type Batch = session.Batch[*localv1.Op]

// WithOnBatch calls fn with every batch the feed receives, before it is
// applied (for logs, debugging and tests). fn must not keep or modify it.
func WithOnBatch(fn func(Batch)) Option { return func(o *session.Options) { o.OnBatch = fn } }

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
	o     session.Options
	state *backend.State
	// instance is the server instance of the state's revision: with it,
	// the position a next batch must follow.
	instance uint64

	ctx     context.Context
	cancel  context.CancelFunc
	start   sync.Once
	want    chan position // asks for the batch after this position
	batches chan Batch
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
	o := session.Build(opts)
	conn, err := session.Dial(target, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Feed{
		conn: conn, node: nodeName, o: o, state: backend.NewState(nodeName),
		ctx: ctx, cancel: cancel,
		want: make(chan position), batches: make(chan Batch), done: make(chan struct{}),
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
		var b Batch
		select {
		case b = <-f.batches:
			f.asked = false
		case <-ctx.Done():
			return nil, backend.Changes{}, ctx.Err() // the batch will wait for the next call
		case <-f.done:
			return nil, backend.Changes{}, f.err
		}
		if f.o.OnBatch != nil {
			f.o.OnBatch(b)
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

// position is where a feed is in the server's history: the Sync of the
// last batch it applied.
type position struct{ instance, revision uint64 }

// receive runs the session: one batch per want, handed over on batches.
func (f *Feed) receive(ctx context.Context) {
	defer close(f.done)
	client := localv1.NewWatchClient(f.conn)
	s := &session.Session[*localv1.Op]{O: f.o, Name: "localv1", Proto: session.Protocol[*localv1.Op]{
		Open: func(ctx context.Context, instance, revision uint64) (*session.Stream[*localv1.Op], error) {
			return session.OpenStream(ctx, client.Watch,
				&localv1.WatchRequest{NodeName: f.node, ServiceProxyName: f.o.ServiceProxyName, InstanceId: instance, Revision: revision},
				func(instance, revision uint64) *localv1.WatchRequest {
					return &localv1.WatchRequest{InstanceId: instance, Revision: revision}
				},
				(*localv1.Ops).GetOps)
		},
		Sync: func(op *localv1.Op) (uint64, uint64, bool) {
			s := op.GetSync()
			return s.GetInstanceId(), s.GetRevision(), s != nil
		},
		IsReset: func(op *localv1.Op) bool { return op.GetReset_() != nil },
	}}
	defer s.Close()
	for {
		select {
		case p := <-f.want:
			// The last batch handed over may not have been applied.
			s.Applied(p.instance, p.revision)
		case <-ctx.Done():
			f.err = errors.New("feed closed")
			return
		}
		b, err := s.Next(ctx)
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
func (f *Feed) apply(b Batch) (backend.Changes, error) {
	var ch backend.Changes
	st := f.state
	base := st.Services // what the batch changes; a reset starts from nothing
	if b.Reset {
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
	for _, op := range b.Ops {
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
	if b.Reset {
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
	if b.Reset {
		ch.Set = slices.Collect(maps.Keys(st.Services))
	}
	slices.SortFunc(ch.Set, backend.ServiceKey.Compare)
	slices.SortFunc(ch.Deleted, backend.ServiceKey.Compare)
	st.Revision = b.Revision
	f.instance = b.InstanceID
	return ch, nil
}
