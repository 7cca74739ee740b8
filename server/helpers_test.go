package server_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// guard bounds a test's waits: reaching it is a failure (a hang), never a
// measure of speed.
const guard = 60 * time.Second

// service is Service i of the test cluster.
func service(i int) *globalv1.Service {
	return &globalv1.Service{
		Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), Type: globalv1.ServiceType_CLUSTER_IP,
		ClusterIps: []string{fmt.Sprintf("10.96.%d.%d", i/256, i%256)},
		Ports:      []*globalv1.ServicePort{{Name: "http", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080}},
	}
}

// slice is Service i's EndpointSlice with eps endpoints over node-0..node-2;
// gen varies the first endpoint's readiness and the last one's port.
func slice(i, eps, gen int) *globalv1.EndpointSlice {
	sl := &globalv1.EndpointSlice{
		Namespace: "ns", Name: fmt.Sprintf("svc-%d-abcde", i), ServiceName: fmt.Sprintf("svc-%d", i),
		AddressType: globalv1.AddressType_IPV4,
		Ports:       []*globalv1.EndpointPort{{Name: proto.String("http"), Protocol: globalv1.Protocol_TCP, Port: 8080}},
	}
	for j := range eps {
		sl.Endpoints = append(sl.Endpoints, &globalv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 1+j, i/256, i%256)},
			NodeName:  fmt.Sprintf("node-%d", j%3),
		})
	}
	if gen%2 == 1 {
		sl.Endpoints[0].Ready = proto.Bool(false)
	}
	return sl
}

// newCluster returns a synced store of n services with eps endpoints each,
// and three nodes.
func newCluster(n, eps int) *cluster.Store {
	s := cluster.NewStore()
	s.Update(func(tx *cluster.Tx) {
		for i := range n {
			tx.SetService(service(i))
			tx.SetEndpointSlice(slice(i, eps, 0))
		}
		for i := range 3 {
			tx.SetNode(&globalv1.Node{Name: fmt.Sprintf("node-%d", i), Addresses: []string{fmt.Sprintf("192.168.0.%d", i)}})
		}
		tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "kubernetes", Cidrs: []string{"10.96.0.0/16"}})
	})
	s.MarkSynced()
	return s
}

// brainState is what the brain computes for a node from store, as a
// backend.State, to compare with what a client received.
func brainState(store *cluster.Store, node string) *backend.State {
	v := brain.NewView(brain.Options{NodeName: node})
	store.View(func(r cluster.Reader) { v.Update(r) })
	st := backend.NewState(node)
	for _, se := range v.State().Services {
		st.Services[backend.KeyOf(se)] = se
	}
	st.Node, st.ServiceCIDRs = v.Node(), v.ServiceCIDRs()
	return st
}

// sameState reports whether two states hold the same view (revisions aside).
func sameState(a, b *backend.State) bool {
	if len(a.Services) != len(b.Services) || !proto.Equal(a.Node, b.Node) || fmt.Sprint(a.ServiceCIDRs) != fmt.Sprint(b.ServiceCIDRs) {
		return false
	}
	for k, se := range a.Services {
		if !proto.Equal(se, b.Services[k]) {
			return false
		}
	}
	return true
}

func diffState(got, want *backend.State) string {
	for k, se := range want.Services {
		if !proto.Equal(se, got.Services[k]) {
			return fmt.Sprintf("%s: got %v, want %v", k, got.Services[k], se)
		}
	}
	for k := range got.Services {
		if want.Services[k] == nil {
			return fmt.Sprintf("%s: unexpected", k)
		}
	}
	return fmt.Sprintf("node %v / %v, cidrs %v / %v", got.Node, want.Node, got.ServiceCIDRs, want.ServiceCIDRs)
}

// testServer is a running server.
type testServer struct {
	addr   string // client target
	cancel context.CancelFunc
	done   chan error
}

// serve serves store on addr ("unix" for a socket in a temporary
// directory, "tcp" for plaintext loopback TCP, or a full address).
func serve(t *testing.T, store *cluster.Store, addr string, opts server.Options, lopts server.ListenOptions) *testServer {
	t.Helper()
	switch addr {
	case "unix":
		addr = "unix://" + filepath.Join(t.TempDir(), "kpng.sock")
	case "tcp":
		addr = "tcp://127.0.0.1:0"
		lopts.Insecure = lopts.TLS == nil
	}
	lis, gopts, err := server.Listen(addr, lopts)
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, store, lis, gopts, opts)
}

func serveOn(t *testing.T, store *cluster.Store, lis net.Listener, gopts []grpc.ServerOption, opts server.Options) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{cancel: cancel, done: make(chan error, 1)}
	switch a := lis.Addr().(type) {
	case *net.UnixAddr:
		ts.addr = "unix://" + a.Name
	default:
		ts.addr = "tcp://" + a.String()
	}
	go func() { ts.done <- server.New(store, opts).Serve(ctx, lis, gopts...) }()
	t.Cleanup(ts.stop)
	return ts
}

// stop kills the server (all streams end) and waits for it.
func (ts *testServer) stop() {
	if ts.cancel == nil {
		return
	}
	ts.cancel()
	<-ts.done
	ts.cancel = nil
}

// opNames renders a batch's operations compactly, for exact assertions.
func opNames(ops []*localv1.Op) []string {
	var out []string
	for _, op := range ops {
		switch o := op.Op.(type) {
		case *localv1.Op_SetService:
			out = append(out, "set_service "+o.SetService.Name)
		case *localv1.Op_DeleteService:
			out = append(out, "delete_service "+o.DeleteService.Name)
		case *localv1.Op_SetEndpoint:
			e := o.SetEndpoint.Endpoint
			out = append(out, fmt.Sprintf("set_endpoint %s %s ready=%v", o.SetEndpoint.Key.Name, e.Ip, e.Ready))
		case *localv1.Op_DeleteEndpoint:
			out = append(out, fmt.Sprintf("delete_endpoint %s %s", o.DeleteEndpoint.Key.Name, o.DeleteEndpoint.Endpoint.Ip))
		case *localv1.Op_SetTriggerTime:
			out = append(out, "set_trigger_time "+o.SetTriggerTime.Key.Name)
		case *localv1.Op_SetNode:
			out = append(out, "set_node")
		case *localv1.Op_Reset_:
			out = append(out, "reset")
		case *localv1.Op_Sync:
			out = append(out, "sync")
		}
	}
	return out
}
