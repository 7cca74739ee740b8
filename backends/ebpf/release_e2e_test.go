//go:build e2e

package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/api/localv1"
)

// dialMapped connects an AF_INET6 socket to an IPv4 address, as
// ::ffff:a.b.c.d (what a dual-stack program does): the IPv6 programs
// translate it, and its destination, once connected, is the mapped
// endpoint.
func dialMapped(addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "tcp6")
	defer f.Close() // FileConn holds a duplicate
	if err := unix.Connect(fd, &unix.SockaddrInet6{Addr: netip.AddrFrom16(ap.Addr().As16()).As16(), Port: int(ap.Port())}); err != nil {
		return nil, err
	}
	return net.FileConn(f)
}

// socketCookie is the kernel's cookie of c's socket (SO_COOKIE), which
// keys its entries in the programs' maps.
func socketCookie(c net.Conn) string {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return "err " + err.Error()
	}
	var cookie uint64
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cookie, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
	}); err != nil {
		return "err " + err.Error()
	}
	if serr != nil {
		return "err " + errName(serr)
	}
	return strconv.FormatUint(cookie, 10)
}

// heldSocket is a socket the client keeps open through a Service: its
// name in the client, its kind (destroyClientMain's open), the Service
// address it dialled and the endpoint the programs chose.
type heldSocket struct {
	name, kind string
	vip, ep    netip.AddrPort
	proto      uint8
	cookie     uint64
}

// open opens h in the client, checks what it sees of its peer, and reads
// its cookie.
func (h *heldSocket) open(t *testing.T, c *client) {
	t.Helper()
	want := "ok peer=" + h.vipString()
	if h.kind == "tcp" || h.kind == "tcp6mapped" {
		want += " at=" + h.ep.String()
	}
	c.want(t, "open", h.name+" "+h.kind+" "+h.vip.String(), want)
	out := c.dial(t, "cookie", h.name)
	cookie, err := strconv.ParseUint(strings.TrimPrefix(out, "ok "), 10, 64)
	if err != nil {
		t.Fatalf("cookie %s: %q", h.name, out)
	}
	h.cookie = cookie
}

// vipString is the Service address as the client prints its peer (an
// AF_INET6 socket's IPv4 peer, mapped, prints as IPv4 in brackets).
func (h *heldSocket) vipString() string {
	if h.kind == "tcp6mapped" {
		return "[" + h.vip.Addr().String() + "]:" + strconv.Itoa(int(h.vip.Port()))
	}
	return h.vip.String()
}

// wantPeer: the socket still sees the Service as its peer (getpeername,
// and the source of an answer for UDP: the reverse entry is there).
func (h *heldSocket) wantPeer(t *testing.T, c *client) {
	t.Helper()
	want := "ok " + h.vipString()
	switch h.kind {
	case "udp":
		want += " from=" + h.vip.String()
	case "udpu":
		want = "ok from=" + h.vip.String()
	}
	c.want(t, "peer", h.name, want)
}

// wantEntries checks h's entries in the maps: its reverse entry (cookie,
// endpoint) → Service address, and an unconnected socket's flow (cookie,
// Service); present while it is open, none once closed.
func (h *heldSocket) wantEntries(t *testing.T, s *socketLab, open bool) {
	t.Helper()
	var vip sockEndpoint
	err := s.objs.KpngRevnat.Lookup(sockRevKey{Cookie: h.cookie, Ep: endpointKey(h.ep)}, &vip)
	switch {
	case open && err != nil:
		t.Errorf("%s (open): its reverse entry towards %s: %v", h.name, h.ep, err)
	case open && keyEndpoint(vip) != h.vip:
		t.Errorf("%s (open): its reverse entry towards %s names %s, want %s", h.name, h.ep, keyEndpoint(vip), h.vip)
	case !open && !errors.Is(err, ebpf.ErrKeyNotExist):
		t.Errorf("%s (closed): its reverse entry towards %s: %v, want none", h.name, h.ep, err)
	}
	if h.kind != "udpu" {
		return
	}
	var fv sockFlowVal
	err = s.objs.KpngFlows.Lookup(sockFlowKey{Cookie: h.cookie, Svc: frontendKey(Frontend{Addr: h.vip.Addr(), Port: h.vip.Port(), Proto: h.proto})}, &fv)
	switch {
	case open && err != nil:
		t.Errorf("%s (open): its flow to %s: %v", h.name, h.vip, err)
	case !open && !errors.Is(err, ebpf.ErrKeyNotExist):
		t.Errorf("%s (closed): its flow to %s: %v, want none", h.name, h.vip, err)
	}
}

// entries counts the entries of a map (a few, or the map is not cleaned).
func entries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var n int
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// web6 is webService on IPv6 addresses, a Service of its own.
func web6(eps ...string) *localv1.ServiceEndpoints {
	se := webService(eps...)
	se.Service.Name = "web6"
	se.Service.Family, se.Service.ClusterIp, se.Service.ExternalIps = localv1.IPFamily_IPV6, clusterIPv6, nil
	return se
}

// TestSocketReleaseDeletesItsEntries: when a socket that the programs
// translated is closed, the sock_release program deletes its reverse
// entry (and an unconnected UDP socket's flow), for TCP, connected and
// unconnected UDP, both families and an AF_INET6 socket dialling IPv4;
// the sockets still open keep theirs and still see the Service as their
// peer; a socket opened before a restart of kpng is cleaned by the new
// run's program. At the end the maps are empty.
func TestSocketReleaseDeletesItsEntries(t *testing.T) {
	s := newHoldLab(t)
	c := s.client
	s.set(webService(ep1), web6(ep1v6))
	ap := netip.MustParseAddrPort
	tcp4, udp4 := ap(clusterIP+":80"), ap(clusterIP+":53")
	tcp6, udp6 := ap("["+clusterIPv6+"]:80"), ap("["+clusterIPv6+"]:53")
	socks := []*heldSocket{
		{name: "tcp4", kind: "tcp", vip: tcp4, ep: ap(ep1 + ":8080"), proto: protoTCP},
		{name: "udp4", kind: "udp", vip: udp4, ep: ap(ep1 + ":5353"), proto: protoUDP},
		{name: "udpu4", kind: "udpu", vip: udp4, ep: ap(ep1 + ":5353"), proto: protoUDP},
		{name: "tcp6", kind: "tcp", vip: tcp6, ep: ap("[" + ep1v6 + "]:8080"), proto: protoTCP},
		{name: "udp6", kind: "udp", vip: udp6, ep: ap("[" + ep1v6 + "]:5353"), proto: protoUDP},
		{name: "udpu6", kind: "udpu", vip: udp6, ep: ap("[" + ep1v6 + "]:5353"), proto: protoUDP},
		{name: "mapped", kind: "tcp6mapped", vip: tcp4, ep: ap(ep1 + ":8080"), proto: protoTCP},
	}
	for _, h := range socks {
		h.open(t, c)
	}
	for _, h := range socks {
		h.wantEntries(t, s, true)
	}
	if t.Failed() {
		t.FailNow()
	}
	// closeAt closes socks[i] and checks its entries and those of the
	// sockets still open.
	closed := map[string]bool{}
	closeAt := func(i int) {
		t.Helper()
		c.want(t, "close", socks[i].name, "ok closed")
		closed[socks[i].name] = true
		socks[i].wantEntries(t, s, false)
		for _, h := range socks {
			if !closed[h.name] {
				h.wantEntries(t, s, true)
			}
		}
	}
	// Half of them, one at a time: the others keep their entries, and
	// still see the Service.
	for i := 0; i < len(socks); i += 2 {
		closeAt(i)
	}
	for _, h := range socks {
		if !closed[h.name] {
			h.wantPeer(t, c)
		}
	}

	// A restart of kpng: the pinned link runs the new run's program, on
	// the pinned maps (the socket storage that lists an unconnected
	// socket's flows included).
	s.stop()
	s.open()
	s.set(webService(ep1), web6(ep1v6))
	for i := 1; i < len(socks); i += 2 {
		socks[i].wantPeer(t, c)
		closeAt(i)
	}
	if n := entries(t, s.objs.KpngRevnat); n != 0 {
		t.Errorf("kpng_revnat holds %d entries with every socket closed, want none", n)
	}
	if n := entries(t, s.objs.KpngFlows); n != 0 {
		t.Errorf("kpng_flows holds %d entries with every socket closed, want none", n)
	}
}

// TestIdleSocketKeepsItsEntryThroughChurn: an idle connected UDP socket
// (a DNS client's) keeps its reverse entry, and so sees the Service as
// the source of its answers, while other sockets of the node make and
// close more connections through Services than kpng_revnat holds
// (65,536): the closed ones' entries are deleted, so the LRU never
// evicts. Before sock_release, it evicted the idle socket's entry, and
// recvmsg then showed the endpoint.
func TestIdleSocketKeepsItsEntryThroughChurn(t *testing.T) {
	s := newHoldLab(t)
	c := s.client
	s.set(webService(ep1))
	idle := &heldSocket{name: "dns", kind: "udp", vip: netip.MustParseAddrPort(clusterIP + ":53"), ep: netip.MustParseAddrPort(ep1 + ":5353"), proto: protoUDP}
	idle.open(t, c)
	idle.wantPeer(t, c)
	capacity := int(s.objs.KpngRevnat.MaxEntries())
	n := capacity + capacity/4
	start := time.Now()
	out := c.dial(t, "connects", fmt.Sprintf("%d %s:80", n, clusterIP))
	if !strings.HasPrefix(out, "ok ") {
		t.Fatalf("%d connections: %q", n, out)
	}
	t.Logf("%d connections made and closed through the Service in %v", n, time.Since(start).Round(time.Millisecond))
	idle.wantEntries(t, s, true)
	idle.wantPeer(t, c)
	if got := entries(t, s.objs.KpngRevnat); got != 1 {
		t.Errorf("kpng_revnat holds %d entries, want the idle socket's only", got)
	}
}
