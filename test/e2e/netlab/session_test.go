//go:build e2e

package netlab

import (
	"net/netip"
	"testing"
	"time"
)

// TestStream proves a Stream stays on one connection (same local port, same
// server) across pings, and sees the server go when its port closes.
func TestStream(t *testing.T) {
	l := New(t, DefaultSpec())
	a, c := l.Pod("pod-a"), l.Pod("pod-c")
	for _, fam := range []int{4, 6} {
		s, r := a.OpenStream(netip.AddrPortFrom(c.Addr(fam), 8080), time.Second)
		if r.Outcome != OK || r.Pod != "pod-c" || r.Peer != r.Local {
			t.Fatalf("IPv%d: open: %v (local %s)", fam, r, r.Local)
		}
		for range 3 {
			if p := s.Ping(time.Second); p.Outcome != OK || p.Pod != "pod-c" || p.Local != r.Local || p.Peer != r.Local {
				t.Fatalf("IPv%d: ping: %v (local %s, first %s)", fam, p, p.Local, r.Local)
			}
		}
		s.Close()
	}
	s, r := a.OpenStream(netip.AddrPortFrom(c.IPv4, 8080), time.Second)
	if r.Outcome != OK {
		t.Fatalf("open: %v", r)
	}
	defer s.Close()
	done := make(chan struct{})
	go func() { c.Server.ClosePort(8080); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ClosePort hangs on an open stream")
	}
	if p := s.Ping(time.Second); p.Outcome == OK {
		t.Fatalf("ping after ClosePort: %v", p)
	}
}

// TestUDPClient proves a UDPClient keeps its source port, and reports an
// ICMP port unreachable as Refused on the same socket.
func TestUDPClient(t *testing.T) {
	l := New(t, DefaultSpec())
	a, c := l.Pod("pod-a"), l.Pod("pod-c")
	for _, fam := range []int{4, 6} {
		u, err := a.OpenUDP(netip.AddrPortFrom(c.Addr(fam), 8080))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if r := u.Exchange(ProbePatience); r.Outcome != OK || r.Pod != "pod-c" || r.Peer != u.Local() {
				t.Fatalf("IPv%d: %v, local %s", fam, r, u.Local())
			}
		}
		u.Close()
	}
	u, err := a.OpenUDP(netip.AddrPortFrom(c.IPv4, 8080))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	c.Server.ClosePort(8080)
	if r := u.Exchange(ProbePatience); r.Outcome != Refused {
		t.Fatalf("after ClosePort: %v", r)
	}
}

// TestHTTPGet proves HTTPGet runs in the host's namespace: a port nothing
// listens on is refused, and a non-HTTP answer is a failure, not a timeout.
func TestHTTPGet(t *testing.T) {
	l := New(t, DefaultSpec())
	ext := l.External
	if r := ext.HTTPGet("http://192.168.77.10:10999/", ProbePatience); r.Outcome != Refused {
		t.Errorf("closed port: %v", r)
	}
	if r := ext.HTTPGet("http://[fd00:77::10]:10999/", ProbePatience); r.Outcome != Refused {
		t.Errorf("closed port, IPv6: %v", r)
	}
	if err := l.Node("node-1").Serve(10998); err != nil {
		t.Fatal(err)
	}
	if r := ext.HTTPGet("http://192.168.77.10:10998/", ProbePatience); r.Outcome != Failed {
		t.Errorf("echo server is no HTTP server: %v", r)
	}
}
