package server

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/local"
)

// localKey is a key of a node's journal: one view entry, or the node-wide
// facts (node set).
type localKey struct {
	node bool
	svc  backend.ServiceKey
}

func compareLocalKeys(a, b localKey) int {
	if a.node != b.node {
		if a.node {
			return -1
		}
		return 1
	}
	return a.svc.Compare(b.svc)
}

// nodeView is one node's view, computed once and shared by all its watchers.
type nodeView struct {
	instance uint64
	j        *journal[localKey, proto.Message]
	cancel   context.CancelFunc
	watchers int
	idle     *time.Timer
	idleSeq  uint64 // when the last watcher left, in releases: older is smaller
}

// acquireView returns the view of a node, starting it if needed. At
// MaxNodeViews, a new view takes the place of the one unwatched for
// longest; when every view is watched, the node is refused.
func (s *Server) acquireView(opts brain.Options) (*nodeView, error) {
	ctx := s.lifetime()
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.views[opts]
	if v == nil {
		if len(s.views) >= s.opts.MaxNodeViews && !s.dropIdleView(ctx) {
			return nil, status.Errorf(codes.ResourceExhausted,
				"node %q: this server already keeps %d node views, all watched (kpng to-api --max-node-views, server.Options.MaxNodeViews); "+
					"for many nodes, node agents should read the cluster state (globalv1: kpng api) and compute their own view",
				opts.NodeName, len(s.views))
		}
		vctx, cancel := context.WithCancel(ctx)
		v = &nodeView{instance: newInstanceID(), j: newJournal[localKey, proto.Message](s.opts.HistorySize, compareLocalKeys), cancel: cancel}
		s.views[opts] = v
		go v.run(vctx, local.NewFeed(s.store, opts))
		klog.FromContext(ctx).V(1).Info("Started a node view", "node", opts.NodeName, "instance", v.instance, "views", len(s.views))
	}
	if v.idle != nil {
		v.idle.Stop()
		v.idle = nil
	}
	v.watchers++
	return v, nil
}

// dropIdleView stops the view unwatched for longest, if any view is
// unwatched. s.mu is held.
func (s *Server) dropIdleView(ctx context.Context) bool {
	var oldest *nodeView
	var key brain.Options
	for opts, v := range s.views {
		if v.watchers == 0 && (oldest == nil || v.idleSeq < oldest.idleSeq) {
			oldest, key = v, opts
		}
	}
	if oldest == nil {
		return false
	}
	oldest.idle.Stop()
	oldest.cancel()
	delete(s.views, key)
	klog.FromContext(ctx).V(1).Info("Dropped an unwatched node view for a new one", "node", key.NodeName)
	return true
}

// releaseView drops a watcher; a view without watchers is stopped after
// IdleViewTimeout.
func (s *Server) releaseView(opts brain.Options, v *nodeView) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v.watchers--
	if v.watchers > 0 {
		return
	}
	s.releases++
	v.idleSeq = s.releases
	v.idle = time.AfterFunc(s.opts.IdleViewTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if v.watchers == 0 && s.views[opts] == v {
			delete(s.views, opts)
			v.cancel()
		}
	})
}

// run publishes the brain's view of the node into the journal.
func (v *nodeView) run(ctx context.Context, feed *local.Feed) {
	first := true
	for {
		st, ch, err := feed.Next(ctx)
		if err != nil {
			return // only ends with ctx
		}
		v.j.update(first, func(set func(localKey, proto.Message)) {
			if first || ch.NodeChanged {
				set(localKey{node: true}, &localv1.NodeInfo{Node: st.Node, ServiceCidrs: st.ServiceCIDRs})
			}
			for _, k := range ch.Set {
				set(localKey{svc: k}, st.Services[k])
			}
			for _, k := range ch.Deleted {
				set(localKey{svc: k}, nil)
			}
		})
		first = false
	}
}

type localService struct {
	localv1.UnimplementedWatchServer
	s *Server
}

// Watch implements localv1.WatchServer.
func (l localService) Watch(stream localv1.Watch_WatchServer) error {
	s := l.s
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	if req.NodeName == "" {
		return status.Error(codes.InvalidArgument, "node_name is required")
	}
	opts := brain.Options{NodeName: req.NodeName, ServiceProxyName: req.ServiceProxyName}
	v, err := s.acquireView(opts)
	if err != nil {
		klog.FromContext(ctx).Info("Refused a node view", "node", req.NodeName, "err", err)
		return err
	}
	defer s.releaseView(opts, v)
	log := klog.FromContext(ctx).WithValues("api", "localv1", "node", req.NodeName)

	var from uint64
	if req.InstanceId == v.instance {
		from = req.Revision
	}
	out := &chunker[*localv1.Op]{ops: s.opts.ChunkSize, bytes: s.opts.ChunkBytes, send: func(ops []*localv1.Op) error {
		return stream.Send(&localv1.Ops{Ops: ops})
	}}
	for {
		if _, err := v.j.wait(ctx, from); err != nil {
			return status.FromContextError(err).Err()
		}
		items, rev, reset := v.j.since(from)
		if reset {
			if err := out.add(&localv1.Op{Op: &localv1.Op_Reset_{Reset_: &localv1.Reset{}}}); err != nil {
				return err
			}
		}
		for _, it := range items {
			if err := localOps(out, it); err != nil {
				return err
			}
		}
		if err := out.add(&localv1.Op{Op: &localv1.Op_Sync{Sync: &localv1.Sync{InstanceId: v.instance, Revision: rev}}}); err != nil {
			return err
		}
		if err := out.flush(); err != nil {
			return err
		}
		log.V(3).Info("Sent a batch", "from", from, "revision", rev, "reset", reset, "keys", len(items))
		from = rev
		// Client-paced: the next batch waits for the client to ask.
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// localOps appends the operations that turn it.old into it.cur.
func localOps(out *chunker[*localv1.Op], it item[localKey, proto.Message]) error {
	if it.key.node {
		ni, _ := it.cur.(*localv1.NodeInfo)
		return out.add(&localv1.Op{Op: &localv1.Op_SetNode{SetNode: ni}})
	}
	key := &localv1.ServiceKey{Namespace: it.key.svc.Namespace, Name: it.key.svc.Name, Family: it.key.svc.Family}
	cur, _ := it.cur.(*localv1.ServiceEndpoints)
	old, _ := it.old.(*localv1.ServiceEndpoints)
	if cur == nil {
		return out.add(&localv1.Op{Op: &localv1.Op_DeleteService{DeleteService: key}})
	}
	if old == nil || !proto.Equal(old.Service, cur.Service) {
		if err := out.add(&localv1.Op{Op: &localv1.Op_SetService{SetService: cur.Service}}); err != nil {
			return err
		}
	}
	// Both endpoint lists are sorted by (port name, protocol, ip, port):
	// merge them.
	var prev []*localv1.Endpoint
	if old != nil {
		prev = old.Endpoints
	}
	next := cur.Endpoints
	for len(prev) > 0 || len(next) > 0 {
		var c int
		switch {
		case len(prev) == 0:
			c = 1
		case len(next) == 0:
			c = -1
		default:
			c = localv1.CompareEndpoints(prev[0], next[0])
		}
		var op *localv1.Op
		switch {
		case c < 0:
			gone := prev[0]
			op = &localv1.Op{Op: &localv1.Op_DeleteEndpoint{DeleteEndpoint: &localv1.EndpointOp{Key: key, Endpoint: &localv1.Endpoint{
				PortName: gone.PortName, Protocol: gone.Protocol, Ip: gone.Ip, Port: gone.Port}}}}
			prev = prev[1:]
		case c > 0:
			op = &localv1.Op{Op: &localv1.Op_SetEndpoint{SetEndpoint: &localv1.EndpointOp{Key: key, Endpoint: next[0]}}}
			next = next[1:]
		default:
			if !proto.Equal(prev[0], next[0]) {
				op = &localv1.Op{Op: &localv1.Op_SetEndpoint{SetEndpoint: &localv1.EndpointOp{Key: key, Endpoint: next[0]}}}
			}
			prev, next = prev[1:], next[1:]
		}
		if op != nil {
			if err := out.add(op); err != nil {
				return err
			}
		}
	}
	if (old == nil && cur.TriggerTimeUnixNano != 0) || (old != nil && old.TriggerTimeUnixNano != cur.TriggerTimeUnixNano) {
		return out.add(&localv1.Op{Op: &localv1.Op_SetTriggerTime{SetTriggerTime: &localv1.TriggerTime{Key: key, UnixNano: cur.TriggerTimeUnixNano}}})
	}
	return nil
}

// chunker groups operations into messages of at most ops operations and
// about bytes encoded bytes: the bound on the count alone would let a
// thousand large objects (EndpointSlices of 1,000 endpoints, Services with
// many addresses) make a message that the client refuses.
type chunker[O proto.Message] struct {
	ops   int
	bytes int
	buf   []O
	size  int // encoded size of a message of buf
	send  func([]O) error
}

func (c *chunker[O]) add(op O) error {
	// In the message, an operation is a field: a tag byte, its length, and
	// the operation itself.
	n := proto.Size(op)
	n += 1 + protowire.SizeVarint(uint64(n))
	if len(c.buf) > 0 && c.size+n > c.bytes {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.buf = append(c.buf, op)
	c.size += n
	if len(c.buf) >= c.ops {
		return c.flush()
	}
	return nil
}

func (c *chunker[O]) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.send(c.buf)
	c.buf, c.size = nil, 0 // the message may still be referenced by the transport
	return err
}
