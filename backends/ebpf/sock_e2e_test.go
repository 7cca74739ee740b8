//go:build e2e

package ebpf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/cgrouptest"
	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/local/backendtest"
)

// clientEnv makes the test binary a client process (see TestMain).
const clientEnv = "KPNG_EBPF_TEST_CLIENT"

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) == "1" {
		clientMain()
		return
	}
	os.Exit(m.Run())
}

// clientMain is the client process of the kernel test: it runs inside the
// test's cgroup from its first instruction, reads one dial per line on
// stdin ("tcp|udp|udpc ADDR") and prints the outcome on stdout:
// "ok <what the server said> peer=<getpeername or recvfrom's address>" or
// "err <errno name>".
func clientMain() {
	sc := bufio.NewScanner(os.Stdin)
	var stop chan chan string
	for sc.Scan() {
		kind, addr, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "probe": // connect to addr in a loop until "stop"
			stop = make(chan chan string)
			go probe(addr, stop)
			fmt.Println("ok probing")
		case "stop":
			res := make(chan string)
			stop <- res
			fmt.Println(<-res)
		default:
			fmt.Println(dial(kind, addr))
		}
	}
}

// probe connects to addr and reads the server's line, over and over,
// until asked for its tally: "ok <probes> <failed> [first failure]".
func probe(addr string, stop chan chan string) {
	var n, failed int
	var first string
	for {
		select {
		case res := <-stop:
			res <- strings.TrimSpace(fmt.Sprintf("ok %d %d %s", n, failed, first))
			return
		default:
		}
		n++
		if out := dial("tcp", addr); !strings.HasPrefix(out, "ok ") {
			failed++
			if first == "" {
				first = out
			}
		}
	}
}

func dial(kind, addr string) string {
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 256)
	switch kind {
	case "tcp", "udpc":
		network := map[string]string{"tcp": "tcp", "udpc": "udp"}[kind]
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		if err != nil {
			return "err " + errName(err)
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if kind == "udpc" {
			if _, err := c.Write([]byte("hi")); err != nil {
				return "err " + errName(err)
			}
		}
		n, err := c.Read(buf)
		if err != nil {
			return "err " + errName(err)
		}
		return fmt.Sprintf("ok %s peer=%s", reached(buf[:n]), peerName(c))
	case "udpflow": // ten datagrams from one socket: where did they go?
		c, err := net.ListenUDP("udp", nil)
		if err != nil {
			return "err " + errName(err)
		}
		defer c.Close()
		c.SetDeadline(deadline)
		to, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return "err " + err.Error()
		}
		seen := map[string]bool{}
		for range 10 {
			if _, err := c.WriteToUDP([]byte("hi"), to); err != nil {
				return "err " + errName(err)
			}
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				return "err " + errName(err)
			}
			seen[reached(buf[:n])] = true
		}
		return fmt.Sprintf("ok %d endpoints", len(seen))
	case "tcp6mapped": // an IPv6 socket dialling an IPv4 address, as dual-stack programs do
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return "err " + err.Error()
		}
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "err " + errName(err)
		}
		f := os.NewFile(uintptr(fd), "tcp6")
		defer f.Close()
		if err := unix.Connect(fd, &unix.SockaddrInet6{Addr: netip.AddrFrom16(ap.Addr().As16()).As16(), Port: int(ap.Port())}); err != nil {
			return "err " + errName(err)
		}
		n, err := f.Read(buf)
		if err != nil {
			return "err " + errName(err)
		}
		sa, err := unix.Getpeername(fd)
		if err != nil {
			return "err " + errName(err)
		}
		peer := sa.(*unix.SockaddrInet6)
		return fmt.Sprintf("ok %s peer=%s", reached(buf[:n]), netip.AddrPortFrom(netip.AddrFrom16(peer.Addr), uint16(peer.Port)))
	case "connects": // "connects N ADDR": N connections, mean time of one
		var n int
		if _, err := fmt.Sscanf(addr, "%d %s", &n, &addr); err != nil {
			return "err " + err.Error()
		}
		start := time.Now()
		for range n {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return "err " + errName(err)
			}
			c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT: ports stay free
			c.Close()
		}
		return fmt.Sprintf("ok %d", time.Since(start).Nanoseconds()/int64(n))
	case "udp":
		c, err := net.ListenUDP("udp", nil)
		if err != nil {
			return "err " + errName(err)
		}
		defer c.Close()
		c.SetDeadline(deadline)
		to, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return "err " + err.Error()
		}
		if _, err := c.WriteToUDP([]byte("hi"), to); err != nil {
			return "err " + errName(err)
		}
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return "err " + errName(err)
		}
		return fmt.Sprintf("ok %s peer=%s", reached(buf[:n]), from)
	}
	return "err unknown dial " + kind
}

// peerName asks the kernel (getpeername(2)) for the connected peer.
func peerName(c net.Conn) string {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return err.Error()
	}
	var out string
	rc.Control(func(fd uintptr) {
		sa, err := unix.Getpeername(int(fd))
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			out = fmt.Sprintf("%s:%d", net.IP(sa.Addr[:]), sa.Port)
		case *unix.SockaddrInet6:
			out = fmt.Sprintf("[%s]:%d", net.IP(sa.Addr[:]), sa.Port)
		default:
			out = fmt.Sprint(err)
		}
	})
	return out
}

func errName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}

// testCgroup creates a cgroup v2 for the test, a strict descendant of the
// hierarchy's root (internal/cgrouptest: programs attached to a root
// cgroup would see every process of the host), and removes it, with the
// hierarchy's private mount, at the end.
func testCgroup(t *testing.T) string {
	t.Helper()
	return cgrouptest.New(t, "ebpf-cg").Path
}

// testConfig is to-ebpf's default configuration for a test's pins, cgroup
// and interfaces, without the /healthz and /metrics servers (their fixed
// ports belong to whatever else runs on the machine).
func testConfig(pins, cgroup, interfaces string) Config {
	c := DefaultConfig()
	c.PinPath, c.CgroupPath, c.Interfaces = pins, cgroup, interfaces
	c.HealthzBindAddress, c.MetricsBindAddress = "", ""
	return c
}

// testBPFFS mounts a BPF filesystem of the test's own (a new instance:
// pins made there are nobody else's) and returns a pin folder in it.
func testBPFFS(t *testing.T) string {
	t.Helper()
	return filepath.Join(cgrouptest.BPFFS(t, "ebpf"), "kpng")
}

// lab is the kernel test's network: a client namespace with no route out
// of the test (a Service address no program rewrote is unreachable there),
// a server namespace with two endpoint addresses, each serving TCP 8080
// and UDP 5353 and answering with the address it was reached on.
type lab struct {
	cli, srv *netnstest.Netns
}

const (
	ep1       = "10.250.0.2"
	ep2       = "10.250.0.3"
	clusterIP = "10.96.100.10"
	extIP     = "203.0.113.10"

	ep1v6       = "fd00:250::2"
	ep2v6       = "fd00:250::3"
	clusterIPv6 = "fd00:96::10"
)

func newLab(t *testing.T) *lab {
	t.Helper()
	l := &lab{cli: netnstest.New(t, "ebpfc"), srv: netnstest.New(t, "ebpfs")}
	if err := l.cli.IPBatch(
		"link add vc type veth peer name vs netns "+l.srv.Name,
		"addr add 10.250.0.1/24 dev vc",
		"addr add fd00:250::1/64 dev vc nodad",
		"link set vc up",
	); err != nil {
		t.Fatal(err)
	}
	if err := l.srv.IPBatch(
		"addr add "+ep1+"/24 dev vs",
		"addr add "+ep2+"/24 dev vs",
		"addr add "+ep1v6+"/64 dev vs nodad",
		"addr add "+ep2v6+"/64 dev vs nodad",
		"link set vs up",
	); err != nil {
		t.Fatal(err)
	}
	// IPv6 addresses are added without duplicate address detection
	// (nodad), so they bind at once, as IPv4 ones.
	for _, ip := range []string{ep1, ep2, ep1v6, ep2v6} {
		nsServe(t, l.srv, ip)
	}
	return l
}

// reached is the address an endpoint's server says it was reached on:
// the first word of its answer (nsServe's).
func reached(answer []byte) string {
	if f := strings.Fields(string(answer)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// client is a process in the test's cgroup and the client namespace.
type client struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

func startClient(t *testing.T, l *lab, cgroup string) *client {
	t.Helper()
	return startClientProcess(t, l, cgroup, clientEnv)
}

// startClientProcess starts the test binary again as a client, with env=1
// (whose main the binary runs then), in the cgroup and the lab's client
// namespace; extra are its arguments.
func startClientProcess(t *testing.T, l *lab, cgroup, env string, extra ...string) *client {
	t.Helper()
	cg, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := l.cli.Command(context.Background(), append([]string{exe}, extra...)...)
	cmd.Env = append(os.Environ(), env+"=1")
	// Born in the cgroup (clone3 CLONE_INTO_CGROUP): every socket it ever
	// opens is the cgroup's. No parent-death signal: it follows the
	// forking thread, which may be one that netnstest's Do discards; the
	// cleanup below (and the namespace's) kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &client{in: in, out: bufio.NewScanner(out)}
}

func (c *client) dial(t *testing.T, kind, addr string) string {
	t.Helper()
	if _, err := fmt.Fprintf(c.in, "%s %s\n", kind, addr); err != nil {
		t.Fatal(err)
	}
	if !c.out.Scan() {
		t.Fatalf("the client process ended: %v", c.out.Err())
	}
	return c.out.Text()
}

func (c *client) want(t *testing.T, kind, addr, want string) {
	t.Helper()
	if got := c.dial(t, kind, addr); got != want {
		t.Errorf("%s %s: %q, want %q", kind, addr, got, want)
	}
}

// webService is the test's Service: TCP 80 and UDP 53 on the cluster IP
// and an external IP, to the given endpoint addresses.
func webService(eps ...string) *localv1.ServiceEndpoints {
	se := &localv1.ServiceEndpoints{Service: &localv1.Service{
		Namespace: "default", Name: "web", Family: localv1.IPFamily_IPV4, Type: localv1.ServiceType_CLUSTER_IP,
		ClusterIp: clusterIP, ExternalIps: []string{extIP},
		Ports: []*localv1.ServicePort{
			{Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, HasEndpoints: len(eps) > 0},
			{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53, HasEndpoints: len(eps) > 0},
		},
	}}
	for _, ip := range eps {
		se.Endpoints = append(se.Endpoints,
			&localv1.Endpoint{PortName: "dns", Protocol: localv1.Protocol_UDP, Ip: ip, Port: 5353, Ready: true, InClusterSet: true},
			&localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_TCP, Ip: ip, Port: 8080, Ready: true, InClusterSet: true})
	}
	return se
}

// TestSocketLoadBalancing runs the programs on real sockets: a client
// process in the test's cgroup dials a Service and reaches an endpoint
// while getpeername and recvfrom show the Service address; endpoint
// changes move new connections; no endpoints refuses; a restart keeps the
// Service working; --cleanup detaches everything.
func TestSocketLoadBalancing(t *testing.T) {
	netnstest.RequireRoot(t)
	l := newLab(t)
	cgroup := testCgroup(t)
	pins := testBPFFS(t)
	t.Cleanup(func() {
		if err := Remove(pins); err != nil {
			t.Errorf("removing the pins: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	p := &Plugin{Config: testConfig(pins, cgroup, ""), set: true}
	start := time.Now()
	b, _, err := p.Open(ctx, backend.Env{NodeName: "node-1"})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Logf("Open (load, verify, attach %d programs): %v", len(hooks), time.Since(start).Round(time.Microsecond))
	st := backend.NewState("node-1")
	key := backend.KeyOf(webService())
	sync := func(ch backend.Changes, se *localv1.ServiceEndpoints) time.Duration {
		t.Helper()
		if se != nil {
			st.Services[key] = se
			ch.Set = []backend.ServiceKey{key}
		} else {
			delete(st.Services, key)
			ch.Deleted = []backend.ServiceKey{key}
		}
		start := time.Now()
		if err := b.Sync(ctx, st, ch); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}

	c := startClient(t, l, cgroup)
	vip, vipUDP, ext := clusterIP+":80", clusterIP+":53", extIP+":80"
	// Before any Service: the address is not routed in the client's
	// namespace.
	c.want(t, "tcp", vip, "err ENETUNREACH")

	d := sync(backend.Changes{Reset: true}, webService(ep1))
	t.Logf("first sync (reset, 1 Service, 4 frontends): %v", d.Round(time.Microsecond))
	c.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip)
	c.want(t, "tcp", ext, "ok "+ep1+":8080 peer="+ext)
	c.want(t, "udp", vipUDP, "ok "+ep1+":5353 peer="+vipUDP)
	c.want(t, "udpc", vipUDP, "ok "+ep1+":5353 peer="+vipUDP)
	// A dual-stack socket (AF_INET6) dialling the IPv4 Service as
	// ::ffff:a.b.c.d: the IPv6 programs find the IPv4 entries.
	c.want(t, "tcp6mapped", vip, "ok "+ep1+":8080 peer=[::ffff:"+clusterIP+"]:80")
	// kpng ebpf-maps: the table of what the kernel holds.
	var table strings.Builder
	if err := WriteTable(&table, pins); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10.96.100.10:80/tcp", "203.0.113.10:53/udp", ep1 + ":8080", ep1 + ":5353"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the maps' table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("kpng ebpf-maps:\n%s", table.String())

	// The endpoint itself, dialled directly, is left alone.
	c.want(t, "tcp", ep2+":8080", "ok "+ep2+":8080 peer="+ep2+":8080")

	// A process outside the cgroup is untouched (the test's own thread,
	// in the same namespace).
	if err := l.cli.Do(func() error {
		_, err := net.DialTimeout("tcp", vip, 5*time.Second)
		if got := errName(err); got != "ENETUNREACH" {
			t.Errorf("a socket outside the cgroup dialled %s: %v, want ENETUNREACH", vip, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// An endpoint change moves new connections.
	d = sync(backend.Changes{}, webService(ep2))
	t.Logf("one endpoint replaced (two ports: two sets written, two frontends per set switched, two sets deleted): %v", d.Round(time.Microsecond))
	c.want(t, "tcp", vip, "ok "+ep2+":8080 peer="+vip)
	c.want(t, "udp", vipUDP, "ok "+ep2+":5353 peer="+vipUDP)

	// Two endpoints: both are used.
	sync(backend.Changes{}, webService(ep1, ep2))
	seen := map[string]bool{}
	for range 40 {
		seen[c.dial(t, "tcp", vip)] = true
	}
	if !seen["ok "+ep1+":8080 peer="+vip] || !seen["ok "+ep2+":8080 peer="+vip] || len(seen) != 2 {
		t.Errorf("40 connections to two endpoints: %v", seen)
	}

	// No endpoint anywhere: refused, as kube-proxy rejects.
	sync(backend.Changes{}, webService())
	c.want(t, "tcp", vip, "err ECONNREFUSED")
	c.want(t, "udp", vipUDP, "err ECONNREFUSED")
	// Endpoints elsewhere but none for this node (internal policy Local):
	// the connection fails as kube-proxy's drop ends, at once.
	local := webService(ep1)
	local.Service.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	sync(backend.Changes{}, local)
	c.want(t, "tcp", vip, "err ETIMEDOUT")

	// A restart of kpng: the pinned links and maps keep the Service
	// working while no kpng runs, and the new run takes over from them.
	sync(backend.Changes{}, webService(ep1))
	cancel()
	c.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip) // between the runs
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	p = &Plugin{Config: testConfig(pins, cgroup, ""), set: true}
	b, _, err = p.Open(ctx, backend.Env{NodeName: "node-1"})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	c.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip) // before the first sync
	d = sync(backend.Changes{Reset: true}, webService(ep2))
	t.Logf("first sync after a restart (reset against the pinned maps): %v", d.Round(time.Microsecond))
	c.want(t, "tcp", vip, "ok "+ep2+":8080 peer="+vip)

	// The Service deleted: its address is no longer rewritten.
	sync(backend.Changes{}, nil)
	c.want(t, "tcp", vip, "err ENETUNREACH")

	// --cleanup detaches the programs and removes the pins.
	sync(backend.Changes{}, webService(ep1))
	c.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip)
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	c.want(t, "tcp", vip, "err ENETUNREACH")
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after --cleanup: %v", pins, err)
	}
}

// TestEndpointChangeCost measures a one-endpoint change of a Service of 100
// endpoints against the kernel's maps (no cgroup, no traffic): write the
// new set, switch the frontend, delete the old set.
func TestEndpointChangeCost(t *testing.T) {
	netnstest.RequireRoot(t)
	o, err := Load("")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer o.Close()
	d := NewDataplane(o.Maps())
	st := backend.NewState("node-1")
	se := func(first int) *localv1.ServiceEndpoints {
		s := webService()
		s.Service.Ports = s.Service.Ports[:1]
		s.Service.Ports[0].HasEndpoints = true
		for i := first; i < first+100; i++ {
			s.Endpoints = append(s.Endpoints, &localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_TCP,
				Ip: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), Port: 8080, InClusterSet: true})
		}
		return s
	}
	key := backend.KeyOf(webService())
	st.Services[key] = se(0)
	if err := d.Sync(context.Background(), st, backend.Changes{Reset: true}); err != nil {
		t.Fatal(err)
	}
	const rounds = 200
	var total, worst time.Duration
	for i := 1; i <= rounds; i++ {
		st.Services[key] = se(i % 2) // one endpoint out, one in
		start := time.Now()
		if err := d.Sync(context.Background(), st, backend.Changes{Set: []backend.ServiceKey{key}}); err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		total += el
		worst = max(worst, el)
	}
	avg := total / rounds
	t.Logf("one endpoint changed in a Service of 100 endpoints, 2 frontends: mean %v, worst %v over %d changes", avg.Round(time.Microsecond), worst.Round(time.Microsecond), rounds)
	// The target is under 1 ms (measured: about 0.2 ms on an idle machine,
	// docs/ebpf.md); CI shares its cores with the whole suite under the
	// race detector, so only a change of another order fails here.
	if avg > 5*time.Millisecond {
		t.Errorf("mean %v: the target is under 1 ms", avg)
	}
}

// socketLab is a started backend on the kernel test's lab, with a client
// in its cgroup.
type socketLab struct {
	t      *testing.T
	pins   string
	cgroup string
	cancel context.CancelFunc // the running Plugin's
	plugin *Plugin
	client *client
	b      backend.Backend
	objs   *sockMaps
	progs  *sockPrograms
	st     *backend.State
	first  bool
}

func newSocketLab(t *testing.T) *socketLab {
	netnstest.RequireRoot(t)
	l := newLab(t)
	cgroup := testCgroup(t)
	pins := testBPFFS(t)
	t.Cleanup(func() {
		if err := Remove(pins); err != nil {
			t.Errorf("removing the pins: %v", err)
		}
	})
	s := &socketLab{t: t, pins: pins, cgroup: cgroup, client: startClient(t, l, cgroup)}
	s.open()
	return s
}

// open runs a new Plugin on the lab's pins and cgroup, as a new run of
// kpng would: its first sync is a reset.
func (s *socketLab) open() {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s.t.Cleanup(cancel)
	p := &Plugin{Config: testConfig(s.pins, s.cgroup, ""), set: true}
	b, _, err := p.Open(ctx, backend.Env{NodeName: "node-1"})
	if err != nil {
		s.t.Fatalf("%+v", err)
	}
	s.cancel, s.plugin, s.b = cancel, p, b
	s.objs, s.progs = &p.objs.objs.sockMaps, &p.objs.objs.sockPrograms
	s.st, s.first = backend.NewState("node-1"), true
}

// stop ends the running Plugin as the end of kpng's process would: every
// handle it held is closed, only the pins remain.
func (s *socketLab) stop() {
	s.cancel()
	s.plugin.objs.Close()
}

func (s *socketLab) set(ses ...*localv1.ServiceEndpoints) {
	s.t.Helper()
	ch := backend.Changes{Reset: s.first}
	s.first = false
	for _, se := range ses {
		k := backend.KeyOf(se)
		s.st.Services[k] = se
		ch.Set = append(ch.Set, k)
	}
	if err := s.b.Sync(context.Background(), s.st, ch); err != nil {
		s.t.Fatal(err)
	}
}

// TestSocketAffinityAndDatagramFlows: with ClientIP affinity every
// connection of a client goes to one endpoint until it leaves the set; an
// unconnected UDP socket's datagrams to a Service stay with one endpoint,
// as kube-proxy's conntrack entry keeps them.
func TestSocketAffinityAndDatagramFlows(t *testing.T) {
	s := newSocketLab(t)
	vip := clusterIP + ":80"
	se := webService(ep1, ep2)
	se.Service.ClientIpAffinitySeconds = 10800
	s.set(se)
	first := s.client.dial(t, "tcp", vip)
	if !strings.HasPrefix(first, "ok ") {
		t.Fatalf("tcp %s: %s", vip, first)
	}
	for range 20 {
		s.client.want(t, "tcp", vip, first)
	}
	// The endpoint of the affinity leaves: the client moves to the other,
	// and stays there.
	other := ep2
	if strings.Contains(first, ep2+":") {
		other = ep1
	}
	se = webService(other)
	se.Service.ClientIpAffinitySeconds = 10800
	s.set(se)
	s.client.want(t, "tcp", vip, "ok "+other+":8080 peer="+vip)
	se = webService(ep1, ep2)
	se.Service.ClientIpAffinitySeconds = 10800
	s.set(se)
	for range 20 {
		s.client.want(t, "tcp", vip, "ok "+other+":8080 peer="+vip)
	}

	// Datagram flows, without affinity: ten datagrams of one socket reach
	// one endpoint (run ten times: a per-datagram choice between two
	// endpoints would show within them).
	s.set(webService(ep1, ep2))
	for range 10 {
		s.client.want(t, "udpflow", clusterIP+":53", "ok 1 endpoints")
	}
}

// TestSocketLoadBalancingIPv6: the IPv6 programs, on an IPv6 Service.
func TestSocketLoadBalancingIPv6(t *testing.T) {
	s := newSocketLab(t)
	se := webService(ep1v6)
	se.Service.Family = localv1.IPFamily_IPV6
	se.Service.ClusterIp = clusterIPv6
	se.Service.ExternalIps = nil
	s.set(se)
	vip, vipUDP := "["+clusterIPv6+"]:80", "["+clusterIPv6+"]:53"
	s.client.want(t, "tcp", vip, "ok ["+ep1v6+"]:8080 peer="+vip)
	s.client.want(t, "udp", vipUDP, "ok ["+ep1v6+"]:5353 peer="+vipUDP)
	s.client.want(t, "udpc", vipUDP, "ok ["+ep1v6+"]:5353 peer="+vipUDP)

	se = webService(ep2v6)
	se.Service.Family = localv1.IPFamily_IPV6
	se.Service.ClusterIp = clusterIPv6
	se.Service.ExternalIps = nil
	s.set(se)
	s.client.want(t, "tcp", vip, "ok ["+ep2v6+"]:8080 peer="+vip)

	se = webService()
	se.Service.Family = localv1.IPFamily_IPV6
	se.Service.ClusterIp = clusterIPv6
	se.Service.ExternalIps = nil
	s.set(se)
	s.client.want(t, "tcp", vip, "err ECONNREFUSED")
	// The IPv4 cluster IP is not an IPv6 Service's.
	s.client.want(t, "tcp", clusterIP+":80", "err ENETUNREACH")
}

// TestSocketLoadBalancingFollowsTheView drives the backend with the views
// the brain computes from Kubernetes objects (local/backendtest): the
// endpoints sockets reach are the view's sets, through readiness,
// terminating fallback and the internal traffic policy.
func TestSocketLoadBalancingFollowsTheView(t *testing.T) {
	s := newSocketLab(t)
	c := backendtest.NewCluster("node-1")
	apply := func(policy string, eps ...string) {
		t.Helper()
		c.Apply(t, []byte(fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {namespace: default, name: web}
spec:
  clusterIP: %s
  clusterIPs: [%s]
  internalTrafficPolicy: %s
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  namespace: default
  name: web-abcde
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints: [%s]
`, clusterIP, clusterIP, policy, strings.Join(eps, ", "))))
		st, ch := c.Next(t)
		if err := s.b.Sync(context.Background(), st, ch); err != nil {
			t.Fatal(err)
		}
	}
	// endpoint: an address, its node and its conditions.
	endpoint := func(ip, node string, ready, serving, terminating bool) string {
		return fmt.Sprintf("{addresses: [%s], nodeName: %s, conditions: {ready: %v, serving: %v, terminating: %v}}", ip, node, ready, serving, terminating)
	}
	vip := clusterIP + ":80"
	only := func(ep string) {
		t.Helper()
		for range 10 {
			s.client.want(t, "tcp", vip, "ok "+ep+":8080 peer="+vip)
		}
	}

	apply("Cluster", endpoint(ep1, "node-2", true, true, false), endpoint(ep2, "node-1", false, false, false))
	only(ep1) // the endpoint that is not ready is not used
	apply("Cluster", endpoint(ep1, "node-2", false, true, true), endpoint(ep2, "node-1", false, false, true))
	only(ep1) // none ready: the serving terminating one
	apply("Cluster", endpoint(ep1, "node-2", false, false, true), endpoint(ep2, "node-1", true, true, false))
	only(ep2)
	apply("Local", endpoint(ep1, "node-2", true, true, false))
	s.client.want(t, "tcp", vip, "err ETIMEDOUT") // none on this node: kube-proxy drops
	apply("Local", endpoint(ep1, "node-2", true, true, false), endpoint(ep2, "node-1", true, true, false))
	only(ep2) // the local one
	apply("Cluster")
	s.client.want(t, "tcp", vip, "err ECONNREFUSED")
}

// TestRestartDropsNoConnection: a client connects to a Service over and
// over while kpng stops, a new kpng starts (loads the programs again,
// updates the pinned links, reconciles the pinned maps with a view whose
// endpoint changed) and syncs: not one connection fails.
func TestRestartDropsNoConnection(t *testing.T) {
	s := newSocketLab(t)
	vip := clusterIP + ":80"
	s.set(webService(ep1))
	s.client.want(t, "probe", vip, "ok probing")
	s.client.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip)
	s.stop()
	s.client.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip) // no kpng running
	s.open()
	s.client.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip) // before the first sync
	s.set(webService(ep2))
	s.client.want(t, "tcp", vip, "ok "+ep2+":8080 peer="+vip)
	out := s.client.dial(t, "stop", "")
	var n, failed int
	if _, err := fmt.Sscanf(out, "ok %d %d", &n, &failed); err != nil {
		t.Fatalf("probe: %q", out)
	}
	t.Logf("%d connections during the restart, %d failed", n, failed)
	if failed > 0 || n == 0 {
		t.Errorf("probes across the restart: %s", out)
	}
}
