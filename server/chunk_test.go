package server_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// bigCluster is a store of n Services with 300 external IPs each (4.5 kB
// per set_service, in either API) and, when eps is not zero, an
// EndpointSlice of eps endpoints with hints each (4.5 kB per
// set_endpoint_slice at 100): a thousand of either make a message of more
// than 4 MiB, the receive limit of a gRPC client with default settings in
// any language (as 1,000 slices of 1,000 endpoints would exceed the 64 MiB
// of client.Dial).
func bigCluster(n, eps int) *cluster.Store {
	s := cluster.NewStore()
	s.Update(func(tx *cluster.Tx) {
		for i := range n {
			svc := service(i)
			for j := range 300 {
				svc.ExternalIps = append(svc.ExternalIps, fmt.Sprintf("172.%d.%d.%d", 16+i/256, i%256, j))
			}
			tx.SetService(svc)
			if eps == 0 {
				continue
			}
			sl := slice(i, eps, 0)
			for _, ep := range sl.Endpoints {
				ep.Zone, ep.HintZones = "zone-a", []string{"zone-a", "zone-b"}
			}
			tx.SetEndpointSlice(sl)
		}
		tx.SetNode(&globalv1.Node{Name: "node-0", Addresses: []string{"192.168.0.1"}})
	})
	s.MarkSynced()
	return s
}

// rawConn is a plain gRPC connection, with gRPC's default receive limit
// (4 MiB), as a client in another language would have.
func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+addr[len("unix://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// checkMessage fails the test if a message of several operations is over
// the server's size bound.
func checkMessage(t *testing.T, api string, m proto.Message, ops int) {
	t.Helper()
	if size := proto.Size(m); ops > 1 && size > server.DefaultChunkBytes {
		t.Errorf("%s: a message of %d operations has %d bytes, over the bound of %d", api, ops, size, server.DefaultChunkBytes)
	}
}

// A first batch of large objects is split by size as well as by count, on
// both APIs: a client with gRPC's default 4 MiB limit receives it all.
func TestLargeObjectsAreChunkedBySize(t *testing.T) {
	const n = 1200
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()

	t.Run("localv1", func(t *testing.T) {
		ts := serve(t, bigCluster(n, 0), "unix", server.Options{}, server.ListenOptions{})
		st, err := localv1.NewWatchClient(rawConn(t, ts.addr)).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&localv1.WatchRequest{NodeName: "node-0"}); err != nil {
			t.Fatal(err)
		}
		services, messages := 0, 0
		for done := false; !done; {
			m, err := st.Recv()
			if err != nil {
				t.Fatalf("after %d messages: %v", messages, err)
			}
			messages++
			checkMessage(t, "localv1", m, len(m.Ops))
			for _, op := range m.Ops {
				if op.GetSetService() != nil {
					services++
				}
				done = op.GetSync() != nil
			}
		}
		if services != n {
			t.Errorf("%d services received, want %d", services, n)
		}
	})

	t.Run("globalv1", func(t *testing.T) {
		ts := serve(t, bigCluster(n, 100), "unix", server.Options{}, server.ListenOptions{})
		st, err := globalv1.NewWatchClient(rawConn(t, ts.addr)).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&globalv1.WatchRequest{}); err != nil {
			t.Fatal(err)
		}
		services, slices, messages := 0, 0, 0
		for done := false; !done; {
			m, err := st.Recv()
			if err != nil {
				t.Fatalf("after %d messages: %v", messages, err)
			}
			messages++
			checkMessage(t, "globalv1", m, len(m.Ops))
			for _, op := range m.Ops {
				if op.GetSetService() != nil {
					services++
				}
				if op.GetSetEndpointSlice() != nil {
					slices++
				}
				done = op.GetSync() != nil
			}
		}
		if services != n || slices != n {
			t.Errorf("%d services and %d slices received, want %d of each", services, slices, n)
		}
	})
}
