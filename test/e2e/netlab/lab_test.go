//go:build e2e

package netlab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// TestTopology checks the plumbing a proxy relies on: sysctls, bridges,
// hairpin and addressing.
func TestTopology(t *testing.T) {
	l := New(t, DefaultSpec())
	if len(l.Nodes) != 2 || len(l.Pods()) != 3 || l.Pod("pod-c").Node != l.Node("node-2") {
		t.Fatalf("unexpected lab shape: nodes %d pods %d", len(l.Nodes), len(l.Pods()))
	}
	n1 := l.Node("node-1")
	t.Logf("br_netfilter available in node namespaces: %v", n1.BrNetfilter)
	want := map[string]string{
		"net.ipv4.ip_forward":              "1",
		"net.ipv6.conf.all.forwarding":     "1",
		"net.ipv4.conf.all.rp_filter":      "2",
		"net.ipv4.conf.eth0.rp_filter":     "2",
		"net.ipv4.conf.kpbr0.rp_filter":    "2",
		"net.ipv4.conf.all.route_localnet": "0",
	}
	if n1.BrNetfilter {
		want["net.bridge.bridge-nf-call-iptables"] = "1"
		want["net.bridge.bridge-nf-call-ip6tables"] = "1"
	}
	for k, v := range want {
		// Read through `ip netns exec sysctl`, independent of the in-thread
		// /proc/sys access that set them.
		out, err := n1.Run("sysctl", "-n", k)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != v {
			t.Errorf("node-1 %s = %s, want %s", k, got, v)
		}
	}
	if got, _ := n1.NS.ReadSysctl("net.ipv4.ip_forward"); got != "1" {
		t.Errorf("ReadSysctl in node-1: ip_forward = %q", got)
	}

	out, err := n1.Run("ip", "-d", "link", "show", "dev", l.Pod("pod-a").Veth)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "master "+PodBridge) || !strings.Contains(out, "hairpin on") {
		t.Errorf("pod-a's veth is not a hairpin port of %s:\n%s", PodBridge, out)
	}
	for _, p := range l.Pods() {
		out, err := p.Run("ip", "-br", "addr", "show", "dev", NodeInterface)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range p.Addrs() {
			if !strings.Contains(out, a.String()+"/") {
				t.Errorf("pod %s: %s lacks %s: %s", p.Name, NodeInterface, a, out)
			}
		}
		if strings.Contains(out, "tentative") {
			t.Errorf("pod %s: tentative address (DAD should be off): %s", p.Name, out)
		}
		if !p.Node.PodCIDRs[0].Contains(p.IPv4) || !p.Node.PodCIDRs[1].Contains(p.IPv6) {
			t.Errorf("pod %s: addresses %v outside node CIDRs %v", p.Name, p.Addrs(), p.Node.PodCIDRs)
		}
	}
}

// TestConnectivity: every kind of client reaches every kind of server, over
// both families and protocols, and the server sees the client's own address
// (there is no NAT anywhere until a proxy adds some).
func TestConnectivity(t *testing.T) {
	l := New(t, DefaultSpec())
	n1, n2 := l.Node("node-1"), l.Node("node-2")
	// Host-network servers on the nodes, as for hostNetwork endpoints or
	// NodePorts.
	for _, n := range l.Nodes {
		if err := n.Serve(9090); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := l.Pod("pod-a"), l.Pod("pod-b"), l.Pod("pod-c")
	cases := []struct {
		name   string
		client *Host
		server *Host
		port   uint16
	}{
		{"pod to pod, same node", &a.Host, &b.Host, 8080},
		{"pod to pod, across nodes", &a.Host, &c.Host, 8080},
		{"pod to pod, across nodes, reverse", &c.Host, &b.Host, 8080},
		{"pod to itself", &a.Host, &a.Host, 8080},
		{"node to local pod", &n1.Host, &a.Host, 8080},
		{"node to remote pod", &n1.Host, &c.Host, 8080},
		{"pod to own node", &a.Host, &n1.Host, 9090},
		{"pod to other node", &a.Host, &n2.Host, 9090},
		{"node to node", &n2.Host, &n1.Host, 9090},
		{"external client to node", l.External, &n1.Host, 9090},
		{"external client to node-2", l.External, &n2.Host, 9090},
	}
	for _, tc := range cases {
		for _, fam := range []int{4, 6} {
			for _, proto := range []Protocol{TCP, UDP} {
				t.Run(fmt.Sprintf("%s/IPv%d/%s", tc.name, fam, proto), func(t *testing.T) {
					dst := netip.AddrPortFrom(tc.server.Addr(fam), tc.port)
					r := tc.client.Probe(proto, dst)
					if r.Outcome != OK || r.Pod != tc.server.Name {
						t.Fatalf("%s -> %s: got %v, want an answer from %s", tc.client.Name, dst, r, tc.server.Name)
					}
					if r.Peer != r.Local {
						t.Errorf("server saw %s, client's socket is %s: unexpected NAT", r.Peer, r.Local)
					}
					if !clientOwns(l, tc.client, r.Local.Addr()) {
						t.Errorf("client socket address %s is not one of %s's", r.Local, tc.client.Name)
					}
				})
			}
		}
	}
}

// clientOwns reports whether a is an address of h (for a node, its node IPs
// or its pod bridge gateways).
func clientOwns(l *Lab, h *Host, a netip.Addr) bool {
	if slices.Contains(h.Addrs(), a) {
		return true
	}
	for _, n := range l.Nodes {
		if &n.Host == h {
			return a == n.GatewayV4 || a == n.GatewayV6
		}
	}
	return false
}

// TestRefusedVsTimedOut: a firewall reject, in each of its forms, is
// Refused, quickly; a drop is TimedOut after the timeout; a closed port on
// a pod is Refused. Checked for forwarded traffic (pod client), locally
// generated traffic (node client) and traffic to the node (external client).
func TestRefusedVsTimedOut(t *testing.T) {
	t.Run("test-process-sockets", func(t *testing.T) { refusedVsTimedOut(t, false) })
	// The sockets of each host's socket maker, in a lab with cgroups.
	t.Run("cgroup-sockets", func(t *testing.T) { refusedVsTimedOut(t, true) })
}

func refusedVsTimedOut(t *testing.T, cgroups bool) {
	const (
		open       = 8080
		reject     = 8081 // default reject: ICMP port unreachable
		drop       = 8082
		prohibited = 8083 // ICMP administratively prohibited
		tcpReset   = 8084 // TCP RST (UDP: port unreachable)
		closed     = 8099 // nobody listens
	)
	spec := DefaultSpec()
	spec.Ports = []int{open, reject, drop, prohibited, tcpReset}
	spec.Cgroups = cgroups
	l := New(t, spec)
	n1 := l.Node("node-1")
	if err := n1.Serve(spec.Ports...); err != nil {
		t.Fatal(err)
	}
	const rules = `
table inet netlab-test {
	chain filter {
		th dport 8081 reject
		th dport 8082 drop
		th dport 8083 reject with icmpx admin-prohibited
		tcp dport 8084 reject with tcp reset
		udp dport 8084 reject
	}
	chain input { type filter hook input priority 0; jump filter; }
	chain forward { type filter hook forward priority 0; jump filter; }
	chain output { type filter hook output priority 0; jump filter; }
}
`
	if _, err := n1.NS.RunInput(rules, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	clients := []struct {
		name   string
		client *Host
		server *Host
	}{
		{"forwarded (pod-a to pod-c)", &l.Pod("pod-a").Host, &l.Pod("pod-c").Host},
		{"local out (node-1 to pod-c)", &n1.Host, &l.Pod("pod-c").Host},
		{"input (external to node-1)", l.External, &n1.Host},
	}
	type attempt struct {
		name   string
		client *Host
		proto  Protocol
		dst    netip.AddrPort
		want   Outcome
		result Result
	}
	var attempts []*attempt
	for _, cl := range clients {
		for _, fam := range []int{4, 6} {
			for _, proto := range []Protocol{TCP, UDP} {
				for _, pc := range []struct {
					port int
					want Outcome
				}{{open, OK}, {reject, Refused}, {drop, TimedOut}, {prohibited, Refused}, {tcpReset, Refused}, {closed, Refused}} {
					attempts = append(attempts, &attempt{
						name:   fmt.Sprintf("%s/IPv%d/%s/%d", cl.name, fam, proto, pc.port),
						client: cl.client,
						proto:  proto,
						dst:    netip.AddrPortFrom(cl.server.Addr(fam), uint16(pc.port)),
						want:   pc.want,
					})
				}
			}
		}
	}
	// All at once, so the drops cost one timeout in all, not one each. An
	// expected drop is a Dial: no answer can come, however long the test
	// process stands still. An expected answer or refusal is a Probe, which
	// waits for it and tells from the kernel's count of retransmitted SYNs
	// whether a refusal came at once (with IP_RECVERR, see recvErr) or only
	// at a retransmission, as a timeout would.
	var wg sync.WaitGroup
	for _, a := range attempts {
		wg.Go(func() {
			if a.want == TimedOut {
				a.result = a.client.Dial(a.proto, a.dst, DefaultTimeout)
			} else {
				a.result = a.client.Probe(a.proto, a.dst)
			}
		})
	}
	wg.Wait()
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			r := a.result
			if r.Outcome != a.want {
				t.Fatalf("%s -> %s: got %v, want %v", a.client.Name, a.dst, r, a.want)
			}
			switch a.want {
			case Refused:
				if r.Retransmits > 0 {
					t.Errorf("refused only after %d retransmitted SYNs (%v): looks like a timeout", r.Retransmits, r.Elapsed)
				}
			case TimedOut:
				if r.Elapsed < DefaultTimeout*9/10 {
					t.Errorf("timed out after only %v, timeout %v", r.Elapsed, DefaultTimeout)
				}
				// The unanswered socket's own address, to look it up in the
				// nodes' conntrack tables: in the error, and in Local.
				if !r.Local.IsValid() || r.Local.Port() == 0 || r.Local.Addr().Is4() != a.dst.Addr().Is4() ||
					!strings.Contains(r.Err.Error(), r.Local.String()) {
					t.Errorf("a timed-out %s attempt: local address %v, error %q; want the socket's address in both", a.proto, r.Local, r.Err)
				}
			}
			t.Logf("%v", r)
		})
	}
}

// TestRejectsAreNotRateLimited: the kernel rate-limits ICMP errors by
// default (six in a burst per destination); labs turn that off, or a Spread
// over a rejecting service would see drops.
func TestRejectsAreNotRateLimited(t *testing.T) {
	spec := DefaultSpec()
	spec.Ports = []int{8080, 8081}
	l := New(t, spec)
	if _, err := l.Node("node-1").NS.RunInput("table inet t {\n chain f {\n type filter hook forward priority 0; th dport 8081 reject\n }\n}\n", "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	a := l.Pod("pod-a")
	for _, fam := range []int{4, 6} {
		dst := netip.AddrPortFrom(l.Pod("pod-c").Addr(fam), 8081)
		got := Spread(100, func() Result { return a.UDP(dst) })
		if got["<refused>"] != 100 {
			t.Errorf("IPv%d: 100 datagrams to a rejected port: %s", fam, FormatSpread(got))
		}
		// Closed port: the ICMP comes from pod-c itself.
		dst = netip.AddrPortFrom(l.Pod("pod-c").Addr(fam), 8099)
		got = Spread(100, func() Result { return a.UDP(dst) })
		if got["<refused>"] != 100 {
			t.Errorf("IPv%d: 100 datagrams to a closed port: %s", fam, FormatSpread(got))
		}
	}
}

// TestClosePort: a pod whose server stops listening refuses, and serves
// again once it listens again.
func TestClosePort(t *testing.T) {
	l := New(t, DefaultSpec())
	a, c := l.Pod("pod-a"), l.Pod("pod-c")
	for _, fam := range []int{4, 6} {
		dst := netip.AddrPortFrom(c.Addr(fam), 8080)
		c.Server.ClosePort(8080)
		for _, r := range []Result{a.TCP(dst), a.UDP(dst)} {
			if r.Outcome != Refused {
				t.Errorf("closed port %s: got %v, want refused", dst, r)
			}
		}
		if err := c.Server.Listen(8080); err != nil {
			t.Fatal(err)
		}
		for _, r := range []Result{a.TCP(dst), a.UDP(dst)} {
			if r.Outcome != OK || r.Pod != "pod-c" {
				t.Errorf("reopened port %s: got %v", dst, r)
			}
		}
	}
	if got := c.Server.Ports(); !slices.Equal(got, []int{8080}) {
		t.Errorf("ports: %v", got)
	}
}

// TestSpread counts answers per pod and per failure.
func TestSpread(t *testing.T) {
	l := New(t, DefaultSpec())
	a := l.Pod("pod-a")
	targets := []netip.AddrPort{
		netip.AddrPortFrom(l.Pod("pod-b").IPv4, 8080),
		netip.AddrPortFrom(l.Pod("pod-c").IPv6, 8080),
		netip.AddrPortFrom(l.Pod("pod-c").IPv4, 8099), // closed
	}
	i := 0
	got := Spread(9, func() Result { r := a.TCP(targets[i%3]); i++; return r })
	want := map[string]int{"pod-b": 3, "pod-c": 3, "<refused>": 3}
	if FormatSpread(got) != FormatSpread(want) {
		t.Errorf("Spread: got %s, want %s", FormatSpread(got), FormatSpread(want))
	}
}

// TestProcess: a long-running process runs in the node's namespace, restarts
// with a new pid, stops, and is stopped at teardown.
func TestProcess(t *testing.T) {
	l := New(t, DefaultSpec())
	n1 := l.Node("node-1")
	p := n1.Start(t, "sleep", "1000")
	checkNetns(t, p.Pid(), n1.NS)
	first := p.Pid()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == first {
		t.Errorf("restart kept pid %d", first)
	}
	checkNetns(t, p.Pid(), n1.NS)
	if processAlive(first) {
		t.Errorf("pid %d survived restart", first)
	}
	if !p.Running() {
		t.Fatalf("not running after restart; output:\n%s", p.Output())
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Error("running after Stop")
	}
	if !strings.Contains(p.Output(), "=== run 2: sleep 1000") {
		t.Errorf("output lacks the second run's header:\n%s", p.Output())
	}

	// A process that exits by itself reports how.
	q := n1.Start(t, "sh", "-c", "echo hello from $(ip -br link show dev kpbr0 | cut -d' ' -f1); exit 3")
	<-q.Exited()
	if q.Err() == nil || !strings.Contains(q.Output(), "hello from kpbr0") {
		t.Errorf("err %v, output:\n%s", q.Err(), q.Output())
	}
}

// checkNetns waits until pid is in ns: `ip netns exec` joins the namespace
// just after it starts, then execs the command in place.
func checkNetns(t *testing.T, pid int, ns *Netns) {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat(ns.Path(), &want); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(5 * time.Second)
	for {
		var got syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &got); err != nil {
			t.Fatal(err)
		}
		if want.Ino == got.Ino && want.Dev == got.Dev {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("pid %d is not in namespace %s", pid, ns.Name)
		}
		time.Sleep(time.Millisecond) // no event for setns(2): poll
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3, after "pid (comm)", is the state.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

// TestTwoLabsAreIsolated: labs use the same addresses, yet never see each
// other.
func TestTwoLabsAreIsolated(t *testing.T) {
	l1 := New(t, DefaultSpec())
	l2 := New(t, DefaultSpec())
	l2.Pod("pod-c").Server.ClosePort(8080)
	dst := netip.AddrPortFrom(l1.Pod("pod-c").IPv4, 8080)
	if r := l1.Pod("pod-a").TCP(dst); r.Outcome != OK {
		t.Errorf("lab 1: %v", r)
	}
	if r := l2.Pod("pod-a").TCP(dst); r.Outcome != Refused {
		t.Errorf("lab 2: %v, want refused (its pod-c closed the port)", r)
	}
}

// labNetnsGone checks that none of names exists any more.
func labNetnsGone(t *testing.T, names []string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("no namespaces to check")
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(netnstest.Dir, n)); err == nil {
			t.Errorf("namespace %s left behind", n)
		}
	}
}

// socketFDs counts this process's open sockets.
func socketFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// TestCleanup: after a passing test, nothing is left: no namespace, no
// process, no socket.
func TestCleanup(t *testing.T) {
	before := socketFDs(t)
	var names []string
	var pid int
	start := time.Now()
	t.Run("lab", func(t *testing.T) {
		l := New(t, DefaultSpec())
		names = l.Namespaces()
		if err := l.Node("node-1").Serve(9090); err != nil {
			t.Fatal(err)
		}
		pid = l.Node("node-2").Start(t, "sleep", "1000").Pid()
	})
	t.Logf("build + teardown: %v", time.Since(start))
	labNetnsGone(t, names)
	if processAlive(pid) {
		t.Errorf("process %d still running", pid)
	}
	if after := socketFDs(t); after != before {
		t.Errorf("%d sockets open before the lab, %d after", before, after)
	}
}

// failingTB is a testing.TB whose test has failed: it records Cleanup
// functions and logs, and stops the goroutine on Fatal, like testing.T.
type failingTB struct {
	testing.TB
	cleanups []func()
	logs     []string
	fatal    string
}

func (f *failingTB) Helper()           {}
func (f *failingTB) Failed() bool      { return true }
func (f *failingTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failingTB) Log(args ...any)   { f.logs = append(f.logs, fmt.Sprint(args...)) }
func (f *failingTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *failingTB) Errorf(format string, args ...any) { f.Logf(format, args...) }
func (f *failingTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *failingTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// runAsTest runs fn with tb in its own goroutine, as the testing package runs
// a test, so that Fatalf can end it.
func runAsTest(tb *failingTB, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// TestCleanupOnFailure: when the test fails, the nodes' kernel state and the
// processes' output are logged before teardown, and teardown still happens.
func TestCleanupOnFailure(t *testing.T) {
	RequireRoot(t)
	tb := &failingTB{TB: t}
	var names []string
	runAsTest(tb, func() {
		l := New(tb, DefaultSpec())
		names = l.Namespaces()
		n1 := l.Node("node-1")
		if _, err := n1.NS.RunInput("table inet dump-me {\n chain c {\n tcp dport 4242 drop\n }\n}\n", "nft", "-f", "-"); err != nil {
			t.Error(err)
		}
		p := n1.Start(tb, "sh", "-c", "echo proxy-says-hi; exec sleep 1000")
		p.WaitOutput(t, "proxy-says-hi", 5*time.Second)
	})
	tb.runCleanups()
	labNetnsGone(t, names)
	logs := strings.Join(tb.logs, "\n")
	for _, want := range []string{"nft list ruleset", "tcp dport 4242 drop", "iptables-save", "conntrack -L", "proxy-says-hi", "torn down"} {
		if !strings.Contains(logs, want) {
			t.Errorf("failure logs lack %q:\n%s", want, logs)
		}
	}
}

// TestCleanupAfterBuildError: a lab that fails half-way is still removed.
func TestCleanupAfterBuildError(t *testing.T) {
	RequireRoot(t)
	tb := &failingTB{TB: t}
	spec := Spec{Nodes: []NodeSpec{{Name: "node-1", Pods: []string{"same"}}, {Name: "node-2", Pods: []string{"same"}}}}
	// This run's namespaces only: another run may build labs meanwhile.
	run, err := netnstest.RunID()
	if err != nil {
		t.Fatal(err)
	}
	before, err := netnstest.List(Prefix + run + "-")
	if err != nil {
		t.Fatal(err)
	}
	runAsTest(tb, func() { New(tb, spec) })
	if !strings.Contains(tb.fatal, `pod name "same" used twice`) {
		t.Errorf("fatal: %q", tb.fatal)
	}
	tb.runCleanups()
	after, err := netnstest.List(Prefix + run + "-")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) > len(before) {
		t.Errorf("namespaces before %v, after %v", before, after)
	}
}
