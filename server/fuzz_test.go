package server_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/server"
)

// answerWithin bounds the wait for a batch the server owes: it has the
// state at hand, so missing it is a hang.
const answerWithin = 10 * time.Second

// FuzzWatch sends the server arbitrary Watch requests, on both services:
// any node name, service proxy name, instance ID and revision, a resume
// with the server's own instance ID and an arbitrary revision included.
// Whatever the request, the server answers at once, with a batch ending in
// Sync or with an error status, and a batch that is not a Reset only ever
// answers a revision the server did send. The committed corpus is under
// testdata/fuzz/FuzzWatch.
//
//	go test ./server -run '^$' -fuzz FuzzWatch -fuzztime 1m
func FuzzWatch(f *testing.F) {
	store := newCluster(3, 2)
	sock := "unix://" + filepath.Join(f.TempDir(), "kpng.sock")
	lis, gopts, err := server.Listen(sock, server.ListenOptions{})
	if err != nil {
		f.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- server.New(store, server.Options{MaxNodeViews: 8, HistorySize: 16}).Serve(sctx, lis, gopts...)
	}()
	f.Cleanup(func() { stop(); <-served })
	cc, err := grpc.NewClient(sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cc.Close() })
	local, global := localv1.NewWatchClient(cc), globalv1.NewWatchClient(cc)

	f.Add("node-0", "", false, uint64(0), uint64(0), []byte("\n\x06node-0"))
	f.Add("node-1", "", true, uint64(0), uint64(1), []byte{})
	f.Add("node-2", "proxy", false, uint64(7), uint64(3), []byte("\x0a\xc0"))
	f.Add("", "", false, uint64(0), uint64(0), []byte("\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, node, proxyName string, resume bool, instance, revision uint64, raw []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
		defer cancel()

		// Raw bytes as the request, as a peer in any language (or none)
		// may send: the server decodes them and answers, or refuses.
		for _, method := range []string{localv1.Watch_Watch_FullMethodName, globalv1.Watch_Watch_FullMethodName} {
			if err := rawRequest(ctx, cc, method, raw); status.Code(err) == codes.DeadlineExceeded {
				t.Fatalf("%s: no answer to %q: %v", method, raw, err)
			}
		}
		// Strings travel as valid UTF-8 (the Go client refuses others;
		// the raw requests above send those).
		if !utf8.ValidString(node) || !utf8.ValidString(proxyName) {
			return
		}

		// localv1: a first stream learns the view's instance and
		// revision; a second one resumes with the fuzzed ones.
		first := &localv1.WatchRequest{NodeName: node, ServiceProxyName: proxyName}
		inst, rev, _, err := localBatch(ctx, local, first)
		if node == "" {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("no node name: got %v, want InvalidArgument", err)
			}
			return
		}
		if status.Code(err) == codes.ResourceExhausted {
			return // every view watched: a clear refusal
		}
		if err != nil {
			t.Fatalf("first request %v: %v", first, err)
		}
		again := &localv1.WatchRequest{NodeName: node, ServiceProxyName: proxyName, InstanceId: instance, Revision: revision}
		if resume {
			again.InstanceId = inst
		}
		if again.InstanceId == inst && again.Revision == rev {
			// Up to date: the next batch waits for a change.
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // a batch that is not owed
			defer cancel()
			if _, _, _, err := localBatch(short, local, again); status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("request %v at the current revision: got %v, want no batch until a change", again, err)
			}
			return
		}
		_, rev2, reset, err := localBatch(ctx, local, again)
		if status.Code(err) == codes.ResourceExhausted {
			return
		}
		if err != nil {
			t.Fatalf("request %v after revision %d: %v", again, rev, err)
		}
		if !reset && (again.InstanceId != inst || again.Revision == 0 || again.Revision > rev2) {
			t.Fatalf("request %v (server at %d/%d): a batch without reset", again, inst, rev2)
		}

		// globalv1: the same, without a node.
		ginst, grev, _, err := globalBatch(ctx, global, &globalv1.WatchRequest{})
		if err != nil {
			t.Fatalf("globalv1 first request: %v", err)
		}
		greq := &globalv1.WatchRequest{InstanceId: instance, Revision: revision}
		if resume {
			greq.InstanceId = ginst
		}
		if greq.InstanceId == ginst && greq.Revision == grev {
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // a batch that is not owed
			defer cancel()
			if _, _, _, err := globalBatch(short, global, greq); status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("globalv1 request %v at the current revision: got %v, want no batch until a change", greq, err)
			}
			return
		}
		_, grev2, greset, err := globalBatch(ctx, global, greq)
		if err != nil {
			t.Fatalf("globalv1 request %v after revision %d: %v", greq, grev, err)
		}
		if !greset && (greq.InstanceId != ginst || greq.Revision == 0 || greq.Revision > grev2) {
			t.Fatalf("globalv1 request %v (server at %d/%d): a batch without reset", greq, ginst, grev2)
		}
	})
}

// rawCodec sends and receives messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// rawRequest opens a stream of method, sends raw as the request, and waits
// for the first message or the error. A decoded request whose first batch
// is owed answers; one that cannot be served ends with a status.
func rawRequest(ctx context.Context, cc *grpc.ClientConn, method string, raw []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	if err := st.SendMsg(&raw); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var reply []byte
	return st.RecvMsg(&reply)
}

// localBatch opens a localv1 stream with req and reads its first batch,
// up to its Sync.
func localBatch(ctx context.Context, c localv1.WatchClient, req *localv1.WatchRequest) (instance, revision uint64, reset bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.Watch(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, false, err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return 0, 0, false, err
		}
		for _, op := range m.Ops {
			switch o := op.Op.(type) {
			case *localv1.Op_Reset_:
				reset = true
			case *localv1.Op_Sync:
				return o.Sync.InstanceId, o.Sync.Revision, reset, nil
			}
		}
	}
}

// globalBatch is localBatch for globalv1.
func globalBatch(ctx context.Context, c globalv1.WatchClient, req *globalv1.WatchRequest) (instance, revision uint64, reset bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.Watch(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, false, err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return 0, 0, false, err
		}
		for _, op := range m.Ops {
			switch o := op.Op.(type) {
			case *globalv1.Op_Reset_:
				reset = true
			case *globalv1.Op_Sync:
				return o.Sync.InstanceId, o.Sync.Revision, reset, nil
			}
		}
	}
}
