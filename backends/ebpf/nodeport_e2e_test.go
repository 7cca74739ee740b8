//go:build e2e

package ebpf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/local/backendtest"
)

// The north-south lab: an outside network (the client's namespace, which
// holds a bridge), a node on it whose eth0 carries the tc programs, a pod
// behind the node (veth vp), and another node's pod on the outside network
// (the "remote" namespace), reached through the node by a route.
//
//	client 192.168.50.2 ─br0─┬─ eth0 192.168.50.1  node  vp 10.244.0.1 ── pod 10.244.0.2
//	  (LB IP 203.0.113.50    └─ eth0 192.168.50.3  remote, pod 10.244.1.2
//	   routed to the node)
const (
	nsClient    = "192.168.50.2"
	nsNode      = "192.168.50.1"
	nsRemote    = "192.168.50.3"
	nsPod       = "10.244.0.2"
	nsRemotePod = "10.244.1.2"
	nsLB        = "203.0.113.50"
	nsExt       = "203.0.113.60" // an external IP of the Service, routed to the node
	// The node's address towards its pod: what masquerade gives the pod
	// (as iptables' MASQUERADE: the outgoing interface's address).
	nsNodeToPod = "10.244.0.1"

	// The same in IPv6.
	nsClient6    = "fd00:50::2"
	nsNode6      = "fd00:50::1"
	nsRemote6    = "fd00:50::3"
	nsPod6       = "fd00:244::2"
	nsRemotePod6 = "fd00:244:1::2"
	nsLB6        = "fd00:113::50"
	nsCluster6   = "fd00:96::20"
	nsNodeToPod6 = "fd00:244::1"
	nsCluster    = "10.96.100.20"
	nsHealthPort = 30099 // the Local Services' health-check node port
)

type nsLab struct {
	cli, node, pod, remote *netnstest.Netns
	pins, cgroup           string
	st                     *backend.State
	b                      backend.Backend
	opts                   backend.Options
	plugin                 *Plugin
	cancel                 context.CancelFunc
	first                  bool
}

func newNSLab(t *testing.T) *nsLab {
	t.Helper()
	netnstest.RequireRoot(t)
	l := &nsLab{
		cli: netnstest.New(t, "npc"), node: netnstest.New(t, "npn"),
		pod: netnstest.New(t, "npp"), remote: netnstest.New(t, "npr"),
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(l.cli.IPBatch(
		"link add br0 type bridge",
		"link set br0 up",
		"addr add "+nsClient+"/24 dev br0",
		"link add n0 type veth peer name eth0 netns "+l.node.Name,
		"link add r0 type veth peer name eth0 netns "+l.remote.Name,
		"link set n0 master br0",
		"link set r0 master br0",
		"link set n0 up",
		"link set r0 up",
		"route add "+nsLB+"/32 via "+nsNode,
		"route add "+nsExt+"/32 via "+nsNode,
		// The pod network through the node, for the direct comparison.
		"route add 10.244.0.0/24 via "+nsNode,
		"addr add "+nsClient6+"/64 dev br0 nodad",
		"route add "+nsLB6+"/128 via "+nsNode6,
	))
	check(l.node.IPBatch(
		"addr add "+nsNode+"/24 dev eth0",
		"link set eth0 up",
		"link add vp type veth peer name eth0 netns "+l.pod.Name,
		"addr add 10.244.0.1/24 dev vp",
		"link set vp up",
		"route add 10.244.1.0/24 via "+nsRemote,
		"addr add "+nsNode6+"/64 dev eth0 nodad",
		"addr add "+nsNodeToPod6+"/64 dev vp nodad",
		"route add fd00:244:1::/64 via "+nsRemote6,
	))
	check(l.node.Sysctl(map[string]string{
		"net.ipv4.ip_forward":          "1",
		"net.ipv6.conf.all.forwarding": "1",
		// The node's own ports, which masquerade avoids.
		"net.ipv4.ip_local_port_range":         "32768 60999",
		"net.ipv4.conf.all.send_redirects":     "0",
		"net.ipv4.conf.default.send_redirects": "0",
	}))
	check(l.pod.IPBatch(
		"addr add "+nsPod+"/24 dev eth0",
		"link set eth0 up",
		"route add default via 10.244.0.1",
		"addr add "+nsPod6+"/64 dev eth0 nodad",
		"route add default via "+nsNodeToPod6,
	))
	check(l.remote.IPBatch(
		"addr add "+nsRemote+"/24 dev eth0",
		"addr add "+nsRemotePod+"/32 dev eth0",
		"addr add "+nsRemote6+"/64 dev eth0 nodad",
		"addr add "+nsRemotePod6+"/128 dev eth0 nodad",
		"link set eth0 up",
	))
	for _, ip := range []string{nsPod, nsPod6} {
		nsServe(t, l.pod, ip)
	}
	for _, ip := range []string{nsRemotePod, nsRemotePod6} {
		nsServe(t, l.remote, ip)
	}
	l.cgroup = testCgroup(t)
	l.pins = testBPFFS(t)
	t.Cleanup(func() {
		if err := Remove(l.pins); err != nil {
			t.Errorf("removing the pins: %v", err)
		}
	})
	l.open(t, "eth0,vp")
	return l
}

// nsServe serves TCP 8080 and UDP 5353 on ip in ns, answering with the
// address reached and the client's address as the endpoint sees it (and
// on TCP, then echoing a line).
func nsServe(t *testing.T, ns *netnstest.Netns, ip string) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := ns.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(ip, "8080")); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", net.JoinHostPort(ip, "5353"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s from %s\n", c.LocalAddr(), c.RemoteAddr())
				// Then echo one line, for a test that keeps the
				// connection open across a change.
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					fmt.Fprint(c, line)
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(fmt.Sprintf("%s from %s", pc.LocalAddr(), from)), from)
		}
	}()
}

// open starts the backend with its tc programs on the node's interfaces
// (eth0 and vp, unless a test says otherwise), attached from a thread
// inside the node's namespace (the interface names are resolved there), as
// a new run of kpng would: its first sync is a
// reset.
func (l *nsLab) open(t *testing.T, interfaces string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &Plugin{Config: testConfig(l.pins, l.cgroup, interfaces), set: true}
	var b backend.Backend
	var opts backend.Options
	start := time.Now()
	err := l.node.Do(func() error {
		var err error
		b, opts, err = p.Open(ctx, backend.Env{NodeName: "node-1"})
		return err
	})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Logf("Open (load, attach 8 socket programs, tc programs on %s): %v", interfaces, time.Since(start).Round(time.Microsecond))
	l.plugin, l.b, l.opts, l.cancel, l.first = p, b, opts, cancel, true
	l.st = backend.NewState("node-1")
	l.st.Node = &localv1.Node{Name: "node-1", Addresses: []string{nsNode, nsNode6}}
}

// stop ends the running backend as the end of kpng's process would.
func (l *nsLab) stop() {
	l.cancel()
	l.plugin.objs.Close()
}

func (l *nsLab) set(t *testing.T, se *localv1.ServiceEndpoints) {
	t.Helper()
	k := backend.KeyOf(se)
	l.st.Services[k] = se
	ch := backend.Changes{Reset: l.first, Set: []backend.ServiceKey{k}}
	l.first = false
	if err := l.b.Sync(context.Background(), l.st, ch); err != nil {
		t.Fatal(err)
	}
	// What the driver does after a sync (the health-check listeners),
	// inside the node's namespace, where they listen.
	if err := l.node.Do(func() error {
		l.opts.OnSync(backend.SyncResult{State: l.st, Changes: ch})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// healthCheck asks the node's health-check node port, from the client,
// and returns the status code and the body.
func (l *nsLab) healthCheck(t *testing.T, port int) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := l.cli.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(fmt.Sprintf("http://%s/", net.JoinHostPort(nsNode, fmt.Sprint(port))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// lbService is a LoadBalancer Service: TCP 80 (node port 30080) and UDP
// 53 (node port 30053). Endpoints are "ip" (in the cluster set) or
// "ip+local" (also in the local set: on this node).
func lbService(policy localv1.TrafficPolicy, eps ...string) *localv1.ServiceEndpoints {
	se := &localv1.ServiceEndpoints{Service: &localv1.Service{
		Namespace: "default", Name: "lb", Family: localv1.IPFamily_IPV4, Type: localv1.ServiceType_LOAD_BALANCER,
		ClusterIp: nsCluster, LoadBalancerIps: []string{nsLB}, ExternalIps: []string{nsExt}, ExternalTrafficPolicy: policy,
		Ports: []*localv1.ServicePort{
			{Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, NodePort: 30080, HasEndpoints: len(eps) > 0},
			{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53, NodePort: 30053, HasEndpoints: len(eps) > 0},
			// Nothing listens on the endpoints' port: they answer with
			// ICMP port unreachable.
			{Name: "closed", Protocol: localv1.Protocol_UDP, Port: 54, NodePort: 30054, HasEndpoints: len(eps) > 0},
		},
	}}
	if policy == localv1.TrafficPolicy_LOCAL {
		se.Service.HealthCheckNodePort = nsHealthPort
	}
	for _, ep := range eps {
		ip, local := strings.CutSuffix(ep, "+local")
		se.Endpoints = append(se.Endpoints,
			&localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_TCP, Ip: ip, Port: 8080, Ready: true, InClusterSet: true, InLocalSet: local, OnThisNode: local},
			&localv1.Endpoint{PortName: "dns", Protocol: localv1.Protocol_UDP, Ip: ip, Port: 5353, Ready: true, InClusterSet: true, InLocalSet: local, OnThisNode: local},
			&localv1.Endpoint{PortName: "closed", Protocol: localv1.Protocol_UDP, Ip: ip, Port: 5354, Ready: true, InClusterSet: true, InLocalSet: local, OnThisNode: local})
	}
	return se
}

// tcp connects from the client's namespace and returns the endpoint's
// line ("<endpoint> from <client as the endpoint saw it>").
func (l *nsLab) tcp(addr string, timeout time.Duration) (string, error) {
	var c net.Conn
	err := l.cli.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// tcpFromPort is tcp from a given client port, closed with a reset (no
// TIME_WAIT), so that the next call may use the port again at once.
func (l *nsLab) tcpFromPort(addr string, port int) (string, error) {
	var c net.Conn
	err := l.cli.Do(func() error {
		d := net.Dialer{
			Timeout:   5 * time.Second,
			LocalAddr: &net.TCPAddr{IP: net.ParseIP(nsClient), Port: port},
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
				})
				return errors.Join(err, serr)
			},
		}
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.(*net.TCPConn).SetLinger(0)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// refused sends a datagram on a connected UDP socket to a frontend whose
// endpoint has nothing listening, and returns the socket's error: the
// endpoint's ICMP port unreachable, translated back to the frontend, makes
// it ECONNREFUSED; untranslated, the client never matches it (timeout).
func (l *nsLab) refused(addr string) string {
	var c net.Conn
	if err := l.cli.Do(func() error {
		var err error
		c, err = net.Dial("udp", addr)
		return err
	}); err != nil {
		return err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi")); err != nil {
		return errName(err)
	}
	_, err := c.Read(make([]byte, 16))
	return errName(err)
}

// udp sends a datagram from a new socket of the client's namespace and
// returns the answer and the address it came from.
func (l *nsLab) udp(addr string) (string, string, error) {
	c, err := l.udpSocket(strings.HasPrefix(addr, "["))
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	return udpExchange(c, addr)
}

func (l *nsLab) udpSocket(v6 bool) (net.PacketConn, error) {
	var c net.PacketConn
	src := nsClient
	if v6 {
		src = nsClient6
	}
	err := l.cli.Do(func() error {
		var err error
		c, err = net.ListenPacket("udp", net.JoinHostPort(src, "0"))
		return err
	})
	return c, err
}

// udpExchange sends a datagram from c and returns the answer and the
// address it came from.
func udpExchange(c net.PacketConn, addr string) (string, string, error) {
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "", "", err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.WriteTo([]byte("hi"), to); err != nil {
		return "", "", err
	}
	buf := make([]byte, 128)
	n, from, err := c.ReadFrom(buf)
	if err != nil {
		return "", "", err
	}
	return string(buf[:n]), from.String(), nil
}

// want checks that TCP and UDP to a frontend reach endpoint ep, seen by it
// as coming from source, with the answers coming back from the frontend.
func (l *nsLab) want(t *testing.T, host string, ep, source string) {
	t.Helper()
	tcpAddr, udpAddr := net.JoinHostPort(host, "80"), net.JoinHostPort(host, "53")
	if host == nsNode || host == nsNode6 {
		tcpAddr, udpAddr = net.JoinHostPort(host, "30080"), net.JoinHostPort(host, "30053")
	}
	// "<endpoint> from <source>:<any port>"
	wantTCP := net.JoinHostPort(ep, "8080") + " from " + net.JoinHostPort(source, "")
	line, err := l.tcp(tcpAddr, 5*time.Second)
	if err != nil || !strings.HasPrefix(line, wantTCP) {
		t.Errorf("tcp %s: %q, %v; want %s*", tcpAddr, line, err, wantTCP)
	}
	wantUDP := net.JoinHostPort(ep, "5353") + " from " + net.JoinHostPort(source, "")
	line, from, err := l.udp(udpAddr)
	if err != nil || !strings.HasPrefix(line, wantUDP) || from != udpAddr {
		t.Errorf("udp %s: %q from %s, %v; want %s* from %s", udpAddr, line, from, err, wantUDP, udpAddr)
	}
}

// TestNodePortFromOutside sends TCP and UDP from outside the node to a
// NodePort on the node's address and to a load-balancer IP routed to the
// node: under externalTrafficPolicy Cluster the endpoint (on this node or
// another) sees the node's address and the client the frontend's; under
// Local only this node's endpoints are used and they see the client's own
// address; no local endpoint drops. Restart and --cleanup follow.
func TestNodePortFromOutside(t *testing.T) {
	l := newNSLab(t)

	// Cluster policy, the endpoint on this node: masqueraded to the node's
	// address on the interface towards the pod.
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local"))
	l.want(t, nsNode, nsPod, nsNodeToPod)
	l.want(t, nsLB, nsPod, nsNodeToPod)
	// The endpoint's ICMP error reaches the client, translated.
	if got := l.refused(nsNode + ":30054"); got != "ECONNREFUSED" {
		t.Errorf("udp to a closed endpoint port through the node port (masquerade, this node): %s, want ECONNREFUSED", got)
	}
	var table strings.Builder
	if err := WriteTable(&table, l.pins); err != nil {
		t.Fatal(err)
	}
	if want := nsNode + ":30080/tcp outside"; !strings.Contains(table.String(), want) {
		t.Errorf("the maps' table lacks %q:\n%s", want, table.String())
	}
	t.Logf("kpng ebpf-maps:\n%s", table.String())

	// Cluster policy, the endpoint on another node: forwarded out of eth0,
	// masqueraded so that the replies come back through this node.
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsRemotePod))
	l.want(t, nsNode, nsRemotePod, nsNode)
	l.want(t, nsLB, nsRemotePod, nsNode)
	l.want(t, nsExt, nsRemotePod, nsNode)
	if got := l.refused(nsLB + ":54"); got != "ECONNREFUSED" {
		t.Errorf("udp to a closed endpoint port through the load-balancer IP (masquerade, another node): %s, want ECONNREFUSED", got)
	}

	// Local policy: this node's endpoint only, the client's address kept.
	l.set(t, lbService(localv1.TrafficPolicy_LOCAL, nsPod+"+local", nsRemotePod))
	for range 5 {
		l.want(t, nsNode, nsPod, nsClient)
		l.want(t, nsLB, nsPod, nsClient)
		l.want(t, nsExt, nsPod, nsClient)
	}
	if got := l.refused(nsNode + ":30054"); got != "ECONNREFUSED" {
		t.Errorf("udp to a closed endpoint port through the node port (Local): %s, want ECONNREFUSED", got)
	}

	// The health-check node port, as kube-proxy serves it: this node has
	// an endpoint.
	if code, body := l.healthCheck(t, nsHealthPort); code != http.StatusOK || !strings.Contains(body, `"localEndpoints": 1`) {
		t.Errorf("health check with a local endpoint: %d %s", code, body)
	}

	// Local policy without an endpoint on this node: dropped, as
	// kube-proxy drops (the client's wait is the only way to see a drop),
	// and the health check fails so that the load balancer avoids the node.
	l.set(t, lbService(localv1.TrafficPolicy_LOCAL, nsRemotePod))
	if code, body := l.healthCheck(t, nsHealthPort); code != http.StatusServiceUnavailable || !strings.Contains(body, `"localEndpoints": 0`) {
		t.Errorf("health check without a local endpoint: %d %s", code, body)
	}
	if line, err := l.tcp(nsNode+":30080", 300*time.Millisecond); errName(err) != "timeout" {
		t.Errorf("tcp to a Local node port without a local endpoint: %q, %v; want a timeout", line, err)
	}

	// No endpoint at all: kube-proxy rejects; the node port is refused by
	// the node (the load-balancer IP, not the node's, is dropped).
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER))
	if line, err := l.tcp(nsNode+":30080", 5*time.Second); errName(err) != "ECONNREFUSED" {
		t.Errorf("tcp to a node port without endpoints: %q, %v; want ECONNREFUSED", line, err)
	}
	if line, err := l.tcp(nsLB+":80", 300*time.Millisecond); errName(err) != "timeout" {
		t.Errorf("tcp to a load-balancer IP without endpoints: %q, %v; want a timeout", line, err)
	}

	// loadBalancerSourceRanges: a client outside them cannot reach the
	// load-balancer IP (dropped), still the node port (not filtered, as
	// kube-proxy); inside them it can.
	ranged := lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local")
	ranged.Service.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	l.set(t, ranged)
	if line, err := l.tcp(nsLB+":80", 300*time.Millisecond); errName(err) != "timeout" {
		t.Errorf("tcp to a load-balancer IP from outside its source ranges: %q, %v; want a timeout", line, err)
	}
	l.want(t, nsNode, nsPod, nsNodeToPod)
	ranged.Service.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "192.168.50.0/28"}
	l.set(t, ranged)
	l.want(t, nsLB, nsPod, nsNodeToPod)

	// Two endpoints under Cluster: both are used.
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local", nsRemotePod))
	seen := map[string]bool{}
	for range 30 {
		line, err := l.tcp(nsNode+":30080", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ep, src, _ := strings.Cut(line, " from ")
		seen[ep] = true
		// Masqueraded from a port the node's own connections never use.
		_, port, _ := net.SplitHostPort(src)
		if p, err := strconv.Atoi(port); err != nil || p >= 32768 && p <= 60999 {
			t.Errorf("masqueraded from port %q, in the node's ephemeral range 32768-60999", port)
		}
	}
	if !seen[nsPod+":8080"] || !seen[nsRemotePod+":8080"] {
		t.Errorf("30 connections to two endpoints reached %v", seen)
	}

	// ClientIP affinity: every connection of the client to one endpoint.
	aff := lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local", nsRemotePod)
	aff.Service.ClientIpAffinitySeconds = 10800
	l.set(t, aff)
	seen = map[string]bool{}
	for range 20 {
		line, err := l.tcp(nsNode+":30080", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ep, _, _ := strings.Cut(line, " ")
		seen[ep] = true
	}
	if len(seen) != 1 {
		t.Errorf("20 connections of one client with ClientIP affinity reached %v", seen)
	}

	// A UDP flow (datagrams of one client socket) keeps its endpoint, and
	// moves when the endpoint leaves, as kube-proxy's deletion of a removed
	// UDP endpoint's conntrack entries makes it.
	l.set(t, lbService(localv1.TrafficPolicy_LOCAL, nsPod+"+local"))
	sock, err := l.udpSocket(false)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	for range 3 {
		if line, from, err := udpExchange(sock, nsNode+":30053"); err != nil || !strings.HasPrefix(line, nsPod+":5353 from "+sock.LocalAddr().String()) || from != nsNode+":30053" {
			t.Errorf("a UDP flow before the endpoint change: %q from %s, %v", line, from, err)
		}
	}
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsRemotePod))
	if line, from, err := udpExchange(sock, nsNode+":30053"); err != nil || !strings.HasPrefix(line, nsRemotePod+":5353 from "+nsNode+":") || from != nsNode+":30053" {
		t.Errorf("the UDP flow after its endpoint left: %q from %s, %v; want %s:5353 from %s", line, from, err, nsRemotePod, nsNode)
	}

	// A new TCP connection from the address and port of an old one (a
	// client behind a NAT reuses ports) is balanced anew once the set
	// changed, as conntrack takes a SYN for a new connection.
	l.set(t, lbService(localv1.TrafficPolicy_LOCAL, nsPod+"+local"))
	if line, err := l.tcpFromPort(nsNode+":30080", 40123); err != nil || !strings.HasPrefix(line, nsPod+":8080 from "+nsClient+":40123") {
		t.Errorf("tcp from port 40123: %q, %v", line, err)
	}
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsRemotePod))
	if line, err := l.tcpFromPort(nsNode+":30080", 40123); err != nil || !strings.HasPrefix(line, nsRemotePod+":8080 from "+nsNode+":") {
		t.Errorf("tcp from port 40123 again, after its endpoint left: %q, %v; want %s:8080 from %s", line, err, nsRemotePod, nsNode)
	}

	// A restart: the pinned links keep working without kpng, and a new run
	// updates them in place.
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local"))
	var established net.Conn
	if err := l.cli.Do(func() error {
		var err error
		established, err = net.DialTimeout("tcp", nsNode+":30080", 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer established.Close()
	established.SetDeadline(time.Now().Add(10 * time.Second))
	estReader := bufio.NewReader(established)
	if line, err := estReader.ReadString('\n'); err != nil || !strings.HasPrefix(line, nsPod+":8080 from "+nsNodeToPod+":") {
		t.Fatalf("a connection kept across the restart: %q, %v", line, err)
	}
	l.stop()
	l.want(t, nsNode, nsPod, nsNodeToPod)
	l.open(t, "eth0,vp")
	l.want(t, nsNode, nsPod, nsNodeToPod)                              // before the first sync
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local")) // every set under a new id
	// The connection opened before the restart still talks to its
	// endpoint, through its masquerade.
	if _, err := fmt.Fprintln(established, "still there"); err != nil {
		t.Fatal(err)
	}
	if line, err := estReader.ReadString('\n'); err != nil || line != "still there\n" {
		t.Errorf("the connection opened before the restart: %q, %v", line, err)
	}
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsRemotePod))
	l.want(t, nsNode, nsRemotePod, nsNode)
	if links := tcLinks(t, l.pins); !slices.Equal(links, []string{"link_tcx_in_eth0", "link_tcx_in_vp", "link_tcx_out_eth0", "link_tcx_out_vp"}) {
		t.Errorf("pinned tc links: %v", links)
	}

	// A restart with vp no longer listed: its links are detached. Under
	// Local the pod's replies are then routed by the node untranslated and
	// translated at eth0's egress.
	l.stop()
	l.open(t, "eth0")
	l.set(t, lbService(localv1.TrafficPolicy_LOCAL, nsPod+"+local"))
	if links := tcLinks(t, l.pins); !slices.Equal(links, []string{"link_tcx_in_eth0", "link_tcx_out_eth0"}) {
		t.Errorf("pinned tc links with eth0 only: %v", links)
	}
	l.want(t, nsNode, nsPod, nsClient)
	l.want(t, nsLB, nsPod, nsClient)

	// --cleanup detaches the tc programs: the node port is the node's own
	// closed port again.
	if err := l.plugin.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.tcp(nsNode+":30080", 5*time.Second); errName(err) != "ECONNREFUSED" {
		t.Errorf("tcp to the node port after --cleanup: %v; want ECONNREFUSED", err)
	}
	if _, err := os.Stat(l.pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after --cleanup: %v", l.pins, err)
	}
}

// lbService6 is lbService in IPv6.
func lbService6(policy localv1.TrafficPolicy, eps ...string) *localv1.ServiceEndpoints {
	se := lbService(policy, eps...)
	se.Service.Family = localv1.IPFamily_IPV6
	se.Service.ClusterIp = nsCluster6
	se.Service.LoadBalancerIps = []string{nsLB6}
	se.Service.ExternalIps = nil
	return se
}

// TestNodePortFromOutsideIPv6: the same in IPv6, on the same lab (the
// IPv6 Service beside the IPv4 one).
func TestNodePortFromOutsideIPv6(t *testing.T) {
	l := newNSLab(t)
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local"))

	l.set(t, lbService6(localv1.TrafficPolicy_CLUSTER, nsPod6+"+local"))
	l.want(t, nsNode6, nsPod6, nsNodeToPod6)
	l.want(t, nsLB6, nsPod6, nsNodeToPod6)
	if got := l.refused(net.JoinHostPort(nsNode6, "30054")); got != "ECONNREFUSED" {
		t.Errorf("udp to a closed endpoint port through the node port (masquerade, this node): %s, want ECONNREFUSED", got)
	}
	l.want(t, nsNode, nsPod, nsNodeToPod) // the IPv4 Service still works

	l.set(t, lbService6(localv1.TrafficPolicy_CLUSTER, nsRemotePod6))
	l.want(t, nsNode6, nsRemotePod6, nsNode6)
	l.want(t, nsLB6, nsRemotePod6, nsNode6)
	if got := l.refused(net.JoinHostPort(nsLB6, "54")); got != "ECONNREFUSED" {
		t.Errorf("udp to a closed endpoint port through the load-balancer IP (masquerade, another node): %s, want ECONNREFUSED", got)
	}

	l.set(t, lbService6(localv1.TrafficPolicy_LOCAL, nsPod6+"+local", nsRemotePod6))
	for range 5 {
		l.want(t, nsNode6, nsPod6, nsClient6)
		l.want(t, nsLB6, nsPod6, nsClient6)
	}
	if got := l.refused(net.JoinHostPort(nsNode6, "30054")); got != "ECONNREFUSED" {
		t.Errorf("udp to a closed endpoint port through the node port (Local): %s, want ECONNREFUSED", got)
	}
	l.set(t, lbService6(localv1.TrafficPolicy_LOCAL, nsRemotePod6))
	if line, err := l.tcp(net.JoinHostPort(nsNode6, "30080"), 300*time.Millisecond); errName(err) != "timeout" {
		t.Errorf("tcp to a Local node port without a local endpoint: %q, %v; want a timeout", line, err)
	}
}

func tcLinks(t *testing.T, pins string) []string {
	t.Helper()
	entries, err := os.ReadDir(pins)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "link_tcx_") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestNodePortLatency measures what the tc programs add to a request from
// outside: TCP connect, one line read, close, from the client to the node
// port (Cluster policy: DNAT, masquerade, forwarded by the program) against
// the same to the pod's own address (routed by the node untranslated),
// alternated; and what the ingress program itself costs per packet
// (kernel run-time statistics). It fails only on a gross regression.
func TestNodePortLatency(t *testing.T) {
	l := newNSLab(t)
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local"))
	l.want(t, nsNode, nsPod, nsNodeToPod)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	prog := l.plugin.objs.np.KpngNodeportIn
	const perRound, rounds = 100, 9
	requests := func(addr string) int64 {
		t.Helper()
		var mean int64
		err := l.cli.Do(func() error {
			start := time.Now()
			buf := make([]byte, 128)
			for range perRound {
				c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
				if err != nil {
					return err
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = c.Read(buf)
				c.Close()
				if err != nil {
					return err
				}
			}
			mean = time.Since(start).Nanoseconds() / perRound
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return mean
	}
	var direct, viaNodePort []int64
	var runtime time.Duration
	var runs uint64
	for range rounds {
		direct = append(direct, requests(nsPod+":8080"))
		before, err := prog.Stats()
		if err != nil {
			t.Fatal(err)
		}
		viaNodePort = append(viaNodePort, requests(nsNode+":30080"))
		after, err := prog.Stats()
		if err != nil {
			t.Fatal(err)
		}
		runtime += after.Runtime - before.Runtime
		runs += after.RunCount - before.RunCount
	}
	slices.Sort(direct)
	slices.Sort(viaNodePort)
	d, v := direct[rounds/2], viaNodePort[rounds/2]
	perPacket := time.Duration(0)
	if runs > 0 {
		perPacket = runtime / time.Duration(runs)
	}
	t.Logf("request (connect, read, close) to the pod %v, through the node port %v (%+.1f%%), median of %d rounds of %d; the ingress program ran %d times (eth0 and vp), %v per packet (kernel stats)",
		time.Duration(d), time.Duration(v), 100*float64(v-d)/float64(d), rounds, perRound, runs, perPacket)
	if v > 3*d {
		t.Errorf("a request through the node port takes %v, to the pod %v", time.Duration(v), time.Duration(d))
	}
}

// TestNodePortFollowsTheView drives the north-south programs with the views
// the brain computes from Kubernetes objects (local/backendtest): a
// LoadBalancer Service whose endpoints are on this node and another, under
// externalTrafficPolicy Local then Cluster.
func TestNodePortFollowsTheView(t *testing.T) {
	l := newNSLab(t)
	c := backendtest.NewCluster("node-1")
	apply := func(policy string) {
		t.Helper()
		c.Apply(t, []byte(fmt.Sprintf(`
apiVersion: v1
kind: Node
metadata: {name: node-1}
status:
  addresses: [{type: InternalIP, address: %s}]
---
apiVersion: v1
kind: Node
metadata: {name: node-2}
status:
  addresses: [{type: InternalIP, address: %s}]
---
apiVersion: v1
kind: Service
metadata: {namespace: default, name: lb}
spec:
  type: LoadBalancer
  clusterIP: %s
  clusterIPs: [%s]
  externalTrafficPolicy: %s
  healthCheckNodePort: %d
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
  - {name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}
status:
  loadBalancer:
    ingress: [{ip: %s, ipMode: VIP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  namespace: default
  name: lb-abcde
  labels: {kubernetes.io/service-name: lb}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}, {name: dns, protocol: UDP, port: 5353}]
endpoints:
- {addresses: [%s], nodeName: node-1, conditions: {ready: true}}
- {addresses: [%s], nodeName: node-2, conditions: {ready: true}}
`, nsNode, nsRemote, nsCluster, nsCluster, policy, nsHealthPort, nsLB, nsPod, nsRemotePod)))
		st, ch := c.Next(t)
		if err := l.b.Sync(context.Background(), st, ch); err != nil {
			t.Fatal(err)
		}
		if err := l.node.Do(func() error {
			l.opts.OnSync(backend.SyncResult{State: st, Changes: ch})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	reached := func(host string) map[string]bool {
		t.Helper()
		seen := map[string]bool{}
		for range 20 {
			line, err := l.tcp(host, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ep, src, _ := strings.Cut(line, " from ")
			h, _, _ := net.SplitHostPort(src)
			seen[ep+" from "+h] = true
		}
		return seen
	}

	apply("Local") // this node's endpoint only, the client's address kept
	for _, host := range []string{nsNode + ":30080", nsLB + ":80"} {
		if seen, want := reached(host), map[string]bool{nsPod + ":8080 from " + nsClient: true}; !maps.Equal(seen, want) {
			t.Errorf("Local, %s: reached %v, want %v", host, seen, want)
		}
	}
	if code, body := l.healthCheck(t, nsHealthPort); code != http.StatusOK || !strings.Contains(body, `"localEndpoints": 1`) {
		t.Errorf("health check: %d %s", code, body)
	}

	apply("Cluster") // both endpoints, masqueraded
	want := map[string]bool{nsPod + ":8080 from " + nsNodeToPod: true, nsRemotePod + ":8080 from " + nsNode: true}
	if seen := reached(nsNode + ":30080"); !maps.Equal(seen, want) {
		t.Errorf("Cluster: reached %v, want %v", seen, want)
	}
}

// TestNodeInterfaces: --ebpf-interfaces=auto picks the Ethernet interfaces
// that are up and hold a global address, in the calling thread's namespace.
func TestNodeInterfaces(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "npi")
	if err := ns.IPBatch(
		"link add v0 type veth peer name v1",
		"addr add 10.9.0.1/24 dev v0", "link set v0 up", // picked
		"link set v1 up", // no global address
		"link add v2 type veth peer name v3",
		"addr add 10.9.2.1/24 dev v2",                                             // down
		"tuntap add t0 mode tun", "addr add 10.9.3.1/24 dev t0", "link set t0 up", // not Ethernet
	); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := ns.Do(func() error {
		var err error
		got, err = NodeInterfaces()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"v0"}) {
		t.Errorf("NodeInterfaces() = %v, want [v0]", got)
	}
}
