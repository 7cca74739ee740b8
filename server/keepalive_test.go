package server_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// A stream with nothing to send for a while is kept, not closed for its
// client's keepalive pings (gRPC servers allow one per 5 minutes by default;
// kpng's client pings an idle connection every 30 s, and gRPC's fastest is
// 10 s, used here: the default policy closes the connection after three).
// The test waits until the server has acknowledged four keepalive pings,
// reading the HTTP/2 frames it writes, and fails at once if it sends a
// GOAWAY.
func TestIdleStreamSurvivesClientKeepalives(t *testing.T) {
	t.Parallel()
	store := newCluster(3, 1)
	lis, gopts, err := server.Listen("unix://"+filepath.Join(t.TempDir(), "kpng.sock"), server.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	frames := newFrameWatch()
	ts := serveOn(t, store, watchedListener{Listener: lis, w: frames}, gopts, server.Options{})
	raw := openRaw(t, ts.addr, "node-0", 0, 0,
		client.WithDialOptions(grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second})))
	raw.batch(t)
	raw.ask(t)
	// Idle until the server has answered four keepalive pings; bounded by
	// guard.
	timeout := time.After(guard)
	for {
		acks, goaway, changed := frames.state()
		if goaway {
			t.Fatalf("the server sent GOAWAY after acknowledging %d keepalive pings", acks)
		}
		if acks >= 4 {
			break
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the server acknowledged %d keepalive pings within %v", acks, guard)
		}
	}
	store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(1, 1, 1)) })
	ops, _ := raw.batch(t) // fails if the stream was closed
	if len(ops) < 2 {
		t.Errorf("batch after the idle time: %q", opNames(ops))
	}
}

// HTTP/2 frame types and flags (RFC 9113) that frameWatch follows.
const (
	frameGoAway = 0x7
	framePing   = 0x6
	flagAck     = 0x1
)

// frameWatch follows the HTTP/2 frames a server writes on its connections:
// its acknowledgements of keepalive pings, and whether it sent a GOAWAY.
// gRPC's keepalive pings carry eight zero bytes, which the acknowledgement
// echoes; its other pings (bandwidth estimation) carry other data.
type frameWatch struct {
	mu      sync.Mutex
	bufs    map[*watchedConn][]byte
	acks    int
	goaway  bool
	changed chan struct{} // closed and replaced on each keepalive ACK or GOAWAY
}

func newFrameWatch() *frameWatch {
	return &frameWatch{bufs: map[*watchedConn][]byte{}, changed: make(chan struct{})}
}

func (w *frameWatch) state() (acks int, goaway bool, changed <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acks, w.goaway, w.changed
}

// wrote parses what the server wrote on c: whole frames, the rest kept
// for the next write.
func (w *frameWatch) wrote(c *watchedConn, p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := append(w.bufs[c], p...)
	for len(buf) >= 9 {
		length := int(binary.BigEndian.Uint32(append([]byte{0}, buf[:3]...)))
		if len(buf) < 9+length {
			break
		}
		typ, flags, payload := buf[3], buf[4], buf[9:9+length]
		keepaliveAck := typ == framePing && flags&flagAck != 0 && bytes.Equal(payload, make([]byte, 8))
		if keepaliveAck || typ == frameGoAway {
			if keepaliveAck {
				w.acks++
			} else {
				w.goaway = true
			}
			close(w.changed)
			w.changed = make(chan struct{})
		}
		buf = buf[9+length:]
	}
	w.bufs[c] = buf
}

type watchedListener struct {
	net.Listener
	w *frameWatch
}

func (l watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, w: l.w}, nil
}

type watchedConn struct {
	net.Conn
	w *frameWatch
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.w.wrote(c, p[:n])
	return n, err
}
