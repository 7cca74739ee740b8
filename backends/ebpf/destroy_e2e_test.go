//go:build e2e

package ebpf

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/internal/netnstest"
)

// destroyClientEnv makes the test binary, run with
// -test.run=^TestDestroyClientProcess$, the client process of the
// socket-destroy tests.
const destroyClientEnv = "KPNG_EBPF_DESTROY_CLIENT"

// TestDestroyClientProcess is not a test: it is the client process of the
// socket-destroy tests (destroyClientMain), when the test binary is run
// so.
func TestDestroyClientProcess(t *testing.T) {
	if os.Getenv(destroyClientEnv) != "1" {
		t.Skip("the client process of the socket-destroy tests, run by them")
	}
	destroyClientMain(os.Stdin, os.Stdout)
	os.Exit(0)
}

// destroyClientMain keeps sockets open across the test's syncs (those of
// the socket-destroy tests and of release_e2e_test.go), one command per
// line, one answer line each:
//
//	open NAME udp|tcp ADDR   connect: "ok peer=<getpeername>" (tcp: " at=<address reached>", from the greeting)
//	open NAME tcp6mapped ADDR  the same from an AF_INET6 socket to an IPv4 ADDR (as ::ffff:a.b.c.d), as dual-stack programs dial
//	open NAME udpu ADDR      an unconnected UDP socket (AF_INET or AF_INET6 as ADDR is), one datagram to ADDR: "ok peer=<its answer's source>"
//	ask NAME                 one exchange: "ok <address reached>" (udp, udpu) or "ok <echo>" (tcp), or "err write|read <errno>"
//	peer NAME                who the socket says its peer is: "ok <getpeername>" (tcp), "ok <getpeername> from=<an answer's source>" (udp), "ok from=<an answer's source>" (udpu)
//	cookie NAME              the socket's cookie (SO_COOKIE): "ok <cookie>"
//	close NAME               close it: "ok closed"
//	connects N ADDR          N TCP connections to ADDR, each closed at once: "ok <mean ns>"
//	recv NAME                one read (up to 2 s): "ok <address reached>" or "err read <errno>"
//	block NAME               start a read that waits (up to 10 s) for a datagram
//	result NAME              what that read returned
//	reopen NAME              close, connect again to the same address, ask
//	many N ADDR              N more connected UDP sockets to ADDR, kept open, one exchange each: "ok <endpoint>=<sockets> ..."
//
// "ok ..." or "err ..." on failure.
func destroyClientMain(in io.Reader, out io.Writer) {
	type sock struct {
		network, addr string
		c             net.Conn
		blocked       chan string
	}
	socks := map[string]*sock{}
	buf := make([]byte, 256)
	// exchange sends a datagram on an unconnected socket and reads the
	// answer, with its source (recvfrom: what the recvmsg programs
	// rewrite).
	exchange := func(s *sock) (string, string) {
		c := s.c.(*net.UDPConn)
		to, err := net.ResolveUDPAddr("udp", s.addr)
		if err != nil {
			return "", "err " + err.Error()
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.WriteToUDP([]byte("hi"), to); err != nil {
			return "", "err write " + errName(err)
		}
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return "", "err read " + errName(err)
		}
		return reached(buf[:n]), "from=" + from.String()
	}
	connect := func(s *sock) string {
		var c net.Conn
		var err error
		switch s.network {
		case "udpu":
			network := "udp4"
			if ap, perr := netip.ParseAddrPort(s.addr); perr == nil && ap.Addr().Is6() {
				network = "udp6"
			}
			if c, err = net.ListenUDP(network, nil); err != nil {
				return "err listen " + errName(err)
			}
			s.c = c
			_, from := exchange(s)
			return strings.Replace(from, "from=", "ok peer=", 1)
		case "tcp6mapped":
			c, err = dialMapped(s.addr)
		default:
			c, err = net.DialTimeout(s.network, s.addr, 5*time.Second)
		}
		if err != nil {
			return "err connect " + errName(err)
		}
		s.c = c
		if s.network == "tcp" || s.network == "tcp6mapped" {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			greeting, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return "err read " + errName(err)
			}
			return "ok peer=" + peerName(c) + " at=" + reached([]byte(greeting))
		}
		return "ok peer=" + peerName(c)
	}
	ask := func(s *sock) string {
		if s.network == "udpu" {
			at, from := exchange(s)
			if at == "" {
				return from
			}
			return "ok " + at
		}
		msg := "hi"
		if s.network == "tcp" || s.network == "tcp6mapped" {
			msg = "ping\n"
		}
		s.c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := s.c.Write([]byte(msg)); err != nil {
			return "err write " + errName(err)
		}
		n, err := s.c.Read(buf)
		if err != nil {
			return "err read " + errName(err)
		}
		if s.network == "tcp" || s.network == "tcp6mapped" {
			return "ok " + strings.TrimSpace(string(buf[:n]))
		}
		return "ok " + reached(buf[:n])
	}
	peer := func(s *sock) string {
		switch s.network {
		case "udpu":
			at, from := exchange(s)
			if at == "" {
				return from
			}
			return "ok " + from
		case "udp":
			c := s.c.(*net.UDPConn)
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("hi")); err != nil {
				return "err write " + errName(err)
			}
			_, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return "err read " + errName(err)
			}
			return "ok " + peerName(c) + " from=" + from.String()
		}
		return "ok " + peerName(s.c)
	}
	var kept []net.Conn
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var answer string
		switch {
		case len(f) == 3 && f[0] == "many":
			n, _ := strconv.Atoi(f[1])
			at := map[string]int{}
			for range n {
				s := &sock{network: "udp", addr: f[2]}
				if answer = connect(s); !strings.HasPrefix(answer, "ok ") {
					break
				}
				kept = append(kept, s.c)
				if answer = ask(s); !strings.HasPrefix(answer, "ok ") {
					break
				}
				at[strings.TrimPrefix(answer, "ok ")]++
			}
			if strings.HasPrefix(answer, "ok ") {
				answer = "ok"
				for _, ep := range slices.Sorted(maps.Keys(at)) {
					answer += fmt.Sprintf(" %s=%d", ep, at[ep])
				}
			}
		case len(f) == 3 && f[0] == "connects": // as clientMain's
			answer = dial("connects", f[1]+" "+f[2])
		case len(f) == 4 && f[0] == "open":
			s := &sock{network: f[2], addr: f[3]}
			socks[f[1]] = s
			answer = connect(s)
		case len(f) == 2 && socks[f[1]] != nil && socks[f[1]].c != nil:
			s := socks[f[1]]
			switch f[0] {
			case "ask":
				answer = ask(s)
			case "recv":
				s.c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, err := s.c.Read(buf); err != nil {
					answer = "err read " + errName(err)
				} else {
					answer = "ok " + reached(buf[:n])
				}
			case "block":
				s.blocked = make(chan string, 1)
				s.c.SetReadDeadline(time.Now().Add(10 * time.Second))
				go func(c net.Conn, res chan string) {
					b := make([]byte, 256)
					if _, err := c.Read(b); err != nil {
						res <- "err read " + errName(err)
						return
					}
					res <- "ok " + reached(b)
				}(s.c, s.blocked)
				answer = "ok blocking"
			case "result":
				if s.blocked == nil {
					answer = "err not blocking"
				} else {
					answer = <-s.blocked
				}
			case "peer":
				answer = peer(s)
			case "cookie":
				answer = "ok " + socketCookie(s.c)
			case "close":
				s.c.Close()
				delete(socks, f[1])
				answer = "ok closed"
			case "reopen":
				s.c.Close()
				if answer = connect(s); strings.HasPrefix(answer, "ok ") {
					answer = ask(s)
				}
			default:
				answer = "err unknown command " + f[0]
			}
		default:
			answer = "err bad command " + sc.Text()
		}
		fmt.Fprintln(out, answer)
	}
}

// startDestroyClient starts the client process (destroyClientMain) in the
// test's cgroup (born there: every socket it opens is the cgroup's) and
// the lab's client namespace.
func startDestroyClient(t *testing.T, l *lab, cgroup string) *client {
	t.Helper()
	return startClientProcess(t, l, cgroup, destroyClientEnv, "-test.run=^TestDestroyClientProcess$")
}

// countingDestroyer counts what the backend's destroyer did.
type countingDestroyer struct {
	d         SocketDestroyer
	destroyed int
	took      time.Duration
}

func (c *countingDestroyer) DestroySockets(ctx context.Context, flows []StaleFlow) (int, error) {
	start := time.Now()
	n, err := c.d.DestroySockets(ctx, flows)
	c.destroyed += n
	c.took = time.Since(start)
	return n, err
}

// count makes the lab's backend count the sockets it destroys, with TCP
// ones too if tcp (another destroyer, with the TCP iterator).
func (s *socketLab) count(tcp bool) *countingDestroyer {
	s.t.Helper()
	var d SocketDestroyer = s.plugin.destroyer
	if tcp {
		des, err := NewDestroyer(s.plugin.objs, s.cgroup, true)
		if err != nil {
			s.t.Fatalf("%+v", err)
		}
		s.t.Cleanup(func() { des.Close() })
		d = des
	}
	c := &countingDestroyer{d: d}
	s.b.(*Dataplane).SetSocketDestroyer(c, tcp)
	return c
}

// newDestroyLab is a socket lab (sock_e2e_test.go) whose client is the
// socket-destroy client, with the socket-destroy programs loaded.
func newDestroyLab(t *testing.T) *socketLab {
	s := newHoldLab(t)
	if s.plugin.destroyer == nil {
		t.Fatal("the backend did not load the socket-destroy programs")
	}
	return s
}

// newHoldLab is a socket lab whose client is the socket-destroy client
// (destroyClientMain), which keeps sockets open; on a kernel without
// bpf_sock_destroy too.
func newHoldLab(t *testing.T) *socketLab {
	netnstest.RequireRoot(t)
	l := newLab(t)
	cgroup := testCgroup(t)
	pins := testBPFFS(t)
	t.Cleanup(func() {
		if err := Remove(pins); err != nil {
			t.Errorf("removing the pins: %v", err)
		}
	})
	s := &socketLab{t: t, pins: pins, cgroup: cgroup, client: startDestroyClient(t, l, cgroup)}
	s.open()
	return s
}

// TestVerifierLoadsDestroyPrograms loads the socket-destroy iterators (UDP
// and TCP) on the socket programs' maps.
func TestVerifierLoadsDestroyPrograms(t *testing.T) {
	netnstest.RequireRoot(t)
	spec, err := loadDestroy()
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Programs) != 2 {
		t.Errorf("bpf/destroy.c has %d programs, want 2 (udp, tcp)", len(spec.Programs))
	}
	o, err := Load("")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer o.Close()
	// What kpng's start pays once (UDP only), then both.
	for i, tcp := range []bool{false, true} {
		start := time.Now()
		d, err := NewDestroyer(o, "/nonexistent", tcp)
		if err != nil {
			t.Fatalf("%+v", err)
		}
		defer d.Close()
		t.Logf("load %d: loaded and attached %d socket-destroy iterators in %v", i+1, len(d.progs), time.Since(start).Round(time.Microsecond))
	}
	d, err := NewDestroyer(o, "/nonexistent", true)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer d.Close()
	logVerified(t, "destroy_udp", d.progs[0])
	logVerified(t, "destroy_tcp", d.progs[1])
}

// dnsService is webService with the endpoints' conditions given: ready,
// serving, terminating, and whether the cluster set holds it (the brain's
// choice: ready ones, or the serving terminating ones when none is).
func dnsService(eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
	se := webService()
	for _, p := range se.Service.Ports {
		p.HasEndpoints = len(eps) > 0
	}
	for _, ep := range eps {
		for _, port := range []struct {
			name  string
			proto localv1.Protocol
			port  int32
		}{{"dns", localv1.Protocol_UDP, 5353}, {"http", localv1.Protocol_TCP, 8080}} {
			se.Endpoints = append(se.Endpoints, &localv1.Endpoint{Ip: ep.Ip, Ready: ep.Ready, Serving: ep.Serving, Terminating: ep.Terminating, InClusterSet: ep.InClusterSet,
				PortName: port.name, Protocol: port.proto, Port: port.port})
		}
	}
	return se
}

func ready(ip string) *localv1.Endpoint {
	return &localv1.Endpoint{Ip: ip, Ready: true, Serving: true, InClusterSet: true}
}

// TestDestroyStaleUDPSockets: connected UDP sockets of the cgroup that
// the socket programs connected through a Service to an endpoint that
// stops serving are destroyed after the sync, as kube-proxy deletes
// their conntrack entries, and connect anew to a serving endpoint; sockets
// to an endpoint that still serves (terminating included), sockets to a
// pod IP directly, and TCP connections are left alone; a Service port
// without serving endpoints keeps its sockets until some serve again.
func TestDestroyStaleUDPSockets(t *testing.T) {
	s := newDestroyLab(t)
	c := s.client
	vip := clusterIP + ":53"
	s.set(dnsService(ready(ep1), ready(ep2)))
	count := s.count(false)

	// Connected UDP sockets through the Service, to both endpoints.
	at := map[string][]string{} // endpoint reached -> sockets
	for i := range 16 {
		name := fmt.Sprintf("u%d", i)
		c.want(t, "open", name+" udp "+vip, "ok peer="+vip)
		got := c.dial(t, "ask", name)
		if got != "ok "+ep1+":5353" && got != "ok "+ep2+":5353" {
			t.Fatalf("ask %s: %q", name, got)
		}
		at[strings.TrimPrefix(got, "ok ")] = append(at[strings.TrimPrefix(got, "ok ")], name)
	}
	on1, on2 := at[ep1+":5353"], at[ep2+":5353"]
	if len(on1) == 0 || len(on2) == 0 {
		t.Fatalf("16 connected sockets, not on both endpoints: %v", at)
	}
	// A socket to the pod IP directly, and a TCP connection through the
	// Service to the endpoint that goes.
	c.want(t, "open", "direct udp "+ep1+":5353", "ok peer="+ep1+":5353")
	c.want(t, "ask", "direct", "ok "+ep1+":5353")
	var tcp1 string
	for i := range 16 {
		name := fmt.Sprintf("t%d", i)
		got := c.dial(t, "open", name+" tcp "+clusterIP+":80")
		if got == "ok peer="+clusterIP+":80 at="+ep1+":8080" {
			tcp1 = name
			break
		}
		if got != "ok peer="+clusterIP+":80 at="+ep2+":8080" {
			t.Fatalf("open %s: %q", name, got)
		}
	}

	// ep1 terminates but still serves: kube-proxy keeps its flows.
	term := &localv1.Endpoint{Ip: ep1, Serving: true, Terminating: true}
	s.set(dnsService(term, ready(ep2)))
	if count.destroyed != 0 {
		t.Errorf("%d sockets destroyed, want none", count.destroyed)
	}
	for _, name := range on1 {
		c.want(t, "ask", name, "ok "+ep1+":5353")
	}

	// ep1 is gone: its sockets through the Service are destroyed, the
	// others are not. A reader waiting on one sees ECONNABORTED.
	c.want(t, "block", on1[0], "ok blocking")
	start := time.Now()
	s.set(dnsService(ready(ep2)))
	t.Logf("a sync that removed an endpoint: %v, of which destroying %d sockets (1 network namespace): %v", time.Since(start).Round(time.Microsecond), count.destroyed, count.took.Round(time.Microsecond))
	// Exactly the UDP sockets through the Service to ep1: not the direct
	// one, not the TCP connection.
	if count.destroyed != len(on1) {
		t.Errorf("%d sockets destroyed, want %d", count.destroyed, len(on1))
	}
	// What the application sees: a read waiting wakes with ECONNABORTED
	// (the error is reported once: to that read, or to the next one); a
	// write finds the socket no longer connected (EDESTADDRREQ). The
	// socket is unconnected now: connecting again balances anew.
	c.want(t, "result", on1[0], "err read ECONNABORTED")
	c.want(t, "ask", on1[0], "err write EDESTADDRREQ")
	for _, name := range on1[1:] {
		c.want(t, "ask", name, "err write EDESTADDRREQ")
		c.want(t, "recv", name, "err read ECONNABORTED")
	}
	for _, name := range on1 {
		c.want(t, "reopen", name, "ok "+ep2+":5353")
	}
	for _, name := range on2 {
		c.want(t, "ask", name, "ok "+ep2+":5353")
	}
	c.want(t, "ask", "direct", "ok "+ep1+":5353")
	if tcp1 != "" {
		c.want(t, "ask", tcp1, "ok ping") // kube-proxy deletes no TCP flow
	} else {
		t.Errorf("no TCP connection reached %s in 16 tries", ep1)
	}

	// No serving endpoint: kube-proxy leaves the flows alone; they are
	// stale once an endpoint serves again.
	count.destroyed = 0
	s.set(dnsService())
	for _, name := range on2 {
		c.want(t, "ask", name, "ok "+ep2+":5353")
	}
	if count.destroyed != 0 {
		t.Errorf("%d sockets destroyed while no endpoint served, want none", count.destroyed)
	}
	c.want(t, "block", on2[0], "ok blocking")
	s.set(dnsService(ready(ep1)))
	c.want(t, "result", on2[0], "err read ECONNABORTED")
	c.want(t, "reopen", on2[0], "ok "+ep1+":5353")
	c.want(t, "ask", "direct", "ok "+ep1+":5353")
}

// TestDestroyStaleSocketsAfterRestart: an endpoint removed while kpng was
// not running: the new run's first sync (a reset) finds the endpoints
// sockets may be connected to in the pinned maps, and destroys those of
// the one that went.
func TestDestroyStaleSocketsAfterRestart(t *testing.T) {
	s := newDestroyLab(t)
	c := s.client
	vip := clusterIP + ":53"
	s.set(dnsService(ready(ep1)))
	c.want(t, "open", "u udp "+vip, "ok peer="+vip)
	c.want(t, "ask", "u", "ok "+ep1+":5353")
	s.stop()
	s.open()
	count := s.count(false)
	c.want(t, "block", "u", "ok blocking")
	s.set(dnsService(ready(ep2)))
	c.want(t, "result", "u", "err read ECONNABORTED")
	c.want(t, "reopen", "u", "ok "+ep2+":5353")
	if count.destroyed != 1 {
		t.Errorf("%d sockets destroyed, want 1", count.destroyed)
	}
}

// TestDestroyStaleTCPSockets: with TCP asked for (not kpng's default, nor
// kube-proxy's), the iter/tcp program aborts the TCP connections through
// the Service to an endpoint that went, and leaves the others.
func TestDestroyStaleTCPSockets(t *testing.T) {
	s := newDestroyLab(t)
	c := s.client
	vip := clusterIP + ":80"
	count := s.count(true) // before the first sync: the ports it tracks
	s.set(dnsService(ready(ep1)))
	c.want(t, "open", "gone tcp "+vip, "ok peer="+vip+" at="+ep1+":8080")
	c.want(t, "open", "direct tcp "+ep1+":8080", "ok peer="+ep1+":8080 at="+ep1+":8080")
	s.set(dnsService(ready(ep2)))
	c.want(t, "open", "kept tcp "+vip, "ok peer="+vip+" at="+ep2+":8080")
	c.want(t, "ask", "gone", "err write ECONNABORTED")
	c.want(t, "ask", "direct", "ok ping")
	c.want(t, "ask", "kept", "ok ping")
	if count.destroyed != 1 {
		t.Errorf("%d sockets destroyed, want 1", count.destroyed)
	}
}

// TestDestroyCost measures a destroy among many sockets: 2,000 connected
// UDP sockets to a pod IP directly and 200 through the Service, in one
// namespace; then the cost of visiting one namespace (a thread entering
// it, the iterator walking its sockets) with nothing to destroy.
func TestDestroyCost(t *testing.T) {
	s := newDestroyLab(t)
	c := s.client
	s.set(dnsService(ready(ep1), ready(ep2)))
	count := s.count(false)
	c.want(t, "many", "2000 "+ep1+":5353", "ok "+ep1+":5353=2000")
	got := c.dial(t, "many", "200 "+clusterIP+":53")
	var on1, on2 int
	if _, err := fmt.Sscanf(got, "ok "+ep1+":5353=%d "+ep2+":5353=%d", &on1, &on2); err != nil || on1+on2 != 200 {
		t.Fatalf("200 sockets through the Service: %q", got)
	}
	start := time.Now()
	s.set(dnsService(ready(ep2)))
	t.Logf("a sync that removed an endpoint: %v, of which destroying %d of 2,200 sockets: %v", time.Since(start).Round(time.Microsecond), count.destroyed, count.took.Round(time.Microsecond))
	if count.destroyed != on1 {
		t.Errorf("%d sockets destroyed, want %d", count.destroyed, on1)
	}
	namespaces, err := cgroupNetns(s.cgroup)
	if err != nil || len(namespaces) != 1 {
		t.Fatalf("the cgroup's namespaces: %v, %v", namespaces, err)
	}
	const rounds = 50
	start = time.Now()
	for range rounds {
		if _, err := s.plugin.destroyer.destroyIn(namespaces[0]); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("one namespace of 2,100 UDP sockets visited, nothing to destroy: %v (mean of %d)", (time.Since(start) / rounds).Round(time.Microsecond), rounds)

	// A namespace without sockets: the iterators still walk the
	// kernel's socket hash tables, which namespaces share unless
	// net.ipv4.udp_child_hash_entries (tcp_child_ehash_entries) is set.
	empty := netnstest.New(t, "ebpfe")
	tcp, err := NewDestroyer(s.plugin.objs, s.cgroup, true)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer tcp.Close()
	for _, d := range []*Destroyer{s.plugin.destroyer, tcp} {
		start = time.Now()
		for range rounds {
			if _, err := d.destroyIn(empty.Path()); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("an empty namespace visited with %d iterators (UDP, TCP): %v (mean of %d)", len(d.iters), (time.Since(start) / rounds).Round(time.Microsecond), rounds)
	}
}

// TestDestroyStaleUDPSocketsIPv6: the same on an IPv6 Service (the
// program reads an AF_INET6 socket's destination).
func TestDestroyStaleUDPSocketsIPv6(t *testing.T) {
	s := newDestroyLab(t)
	c := s.client
	v6 := func(eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
		se := dnsService(eps...)
		se.Service.Family, se.Service.ClusterIp, se.Service.ExternalIps = localv1.IPFamily_IPV6, clusterIPv6, nil
		return se
	}
	vip := "[" + clusterIPv6 + "]:53"
	s.set(v6(ready(ep1v6)))
	count := s.count(false)
	u := &heldSocket{name: "u", kind: "udp", vip: netip.MustParseAddrPort(vip), ep: netip.MustParseAddrPort("[" + ep1v6 + "]:5353"), proto: protoUDP}
	u.open(t, c)
	c.want(t, "ask", "u", "ok ["+ep1v6+"]:5353")
	u.wantEntries(t, s, true)
	c.want(t, "open", "direct udp ["+ep1v6+"]:5353", "ok peer=["+ep1v6+"]:5353")
	c.want(t, "block", "u", "ok blocking")
	s.set(v6(ready(ep2v6)))
	c.want(t, "result", "u", "err read ECONNABORTED")
	// Its reverse entry went with it: the socket is disconnected now, and
	// sock_release, which keys it by the destination, would not find it.
	u.wantEntries(t, s, false)
	c.want(t, "reopen", "u", "ok ["+ep2v6+"]:5353")
	c.want(t, "ask", "direct", "ok ["+ep1v6+"]:5353")
	if count.destroyed != 1 {
		t.Errorf("%d sockets destroyed, want 1", count.destroyed)
	}
}
