//go:build e2e

package ipvs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/ipvs"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/test/e2e/netlab"
)

// Real packets through IPVS. The development machines' kernel has no IPVS:
// these tests run in the VM of hack/vm.sh (see docs/vm.md), which
// hack/test.sh does:
//
//	go test -c -tags e2e -o /tmp/ipvs.test ./backends/ipvs
//	cd backends/ipvs && ../../hack/vm.sh /tmp/ipvs.test -test.v
//
// Each test builds a netlab lab (namespaces of its own), runs the backend
// in node-1's namespace in this process, and observes what a user would:
// which pod answered, which source address it saw, refused or dropped.
// The lab's teardown removes the namespaces, and with them every virtual
// server, ipset and rule the backend wrote.

// node1 is the backend running in a lab's node-1.
type node1 struct {
	t    *testing.T
	lab  *netlab.Lab
	node *netlab.Node
	c    ipvs.Client
	b    *Backend
	prev map[backend.ServiceKey]bool
}

func startNode1(t *testing.T, configure func(*Config)) *node1 {
	t.Helper()
	netlab.RequireRoot(t)
	lab := netlab.New(t, netlab.DefaultSpec())
	n := &node1{t: t, lab: lab, node: lab.Node("node-1"), prev: map[backend.ServiceKey]bool{}}
	cfg := DefaultConfig()
	cfg.IPFamilies = []string{"ipv4"}
	cfg.ClusterCIDRs = []string{"10.244.0.0/16"}
	if configure != nil {
		configure(&cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	err := n.node.Do(func() error {
		var err error
		if n.c, err = ipvs.New(); err != nil {
			return fmt.Errorf("IPVS in node-1 (is ip_vs available? run in hack/vm.sh): %w", err)
		}
		return setupKernel(context.Background(), &cfg, n.c)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cl, ok := n.c.(io.Closer); ok {
			cl.Close()
		}
	})
	n.b = New(&cfg, n.c, &hostKernel{})
	return n
}

// sync makes services the whole view, as the driver would tell it: the
// first call a Reset, then the keys set and deleted.
func (n *node1) sync(services ...*localv1.ServiceEndpoints) {
	n.t.Helper()
	st := stateOf(services...)
	ch := backend.Changes{Reset: len(n.prev) == 0}
	cur := map[backend.ServiceKey]bool{}
	for k := range st.Services {
		cur[k] = true
		ch.Set = append(ch.Set, k)
	}
	for k := range n.prev {
		if !cur[k] {
			ch.Deleted = append(ch.Deleted, k)
		}
	}
	n.prev = cur
	n.syncChanges(st, ch)
}

func (n *node1) syncChanges(st *backend.State, ch backend.Changes) {
	n.t.Helper()
	slices.SortFunc(ch.Set, backend.ServiceKey.Compare)
	slices.SortFunc(ch.Deleted, backend.ServiceKey.Compare)
	if err := n.node.Do(func() error { return n.b.Sync(context.Background(), st, ch) }); err != nil {
		n.t.Fatalf("sync: %v", err)
	}
}

// dests lists a virtual server's real servers as "ip:port w=N".
func (n *node1) dests(vs string) []string {
	n.t.Helper()
	ap := netip.MustParseAddrPort(vs)
	list, err := listDests(n.c, ipvs.Service{Address: ap.Addr(), Port: ap.Port(), Protocol: ipvs.TCP, Family: ipvs.INET})
	if err != nil {
		n.t.Fatalf("list %s's real servers: %v", vs, err)
	}
	var out []string
	for _, d := range list {
		out = append(out, fmt.Sprintf("%s w=%d", netip.AddrPortFrom(d.Address, d.Port), d.Weight))
	}
	slices.Sort(out)
	return out
}

var (
	podA = "10.244.1.10" // node-1
	podB = "10.244.1.11" // node-1
	podC = "10.244.2.10" // node-2
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// answeredBy dials dst n times from h and returns the pods that answered,
// failing on anything but an answer.
func answeredBy(t *testing.T, h *netlab.Host, proto netlab.Protocol, dst netip.AddrPort, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		r := h.Dial(proto, dst, 2*time.Second)
		if r.Outcome != netlab.OK {
			t.Fatalf("%s %s from %s: %v", proto, dst, h.Name, r)
		}
		got[r.Pod]++
	}
	return got
}

func TestPackets(t *testing.T) {
	n := startNode1(t, nil)
	ext := n.lab.External

	web := service("default", "web", "10.96.0.10", withNodePort(30080),
		withEndpoints(ep(podA, 8080, true), ep(podC, 8080, false)))
	local := service("default", "local", "10.96.0.11", withNodePort(30081),
		withEndpoints(ep(podB, 8080, true), ep(podC, 8080, false)))
	local.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	empty := service("default", "empty", "10.96.0.12", withNodePort(30082))
	sticky := service("default", "sticky", "10.96.0.13",
		withEndpoints(ep(podA, 8080, true), ep(podB, 8080, true), ep(podC, 8080, false)))
	sticky.Service.ClientIpAffinitySeconds = 600
	dns := service("kube-system", "dns", "10.96.0.53",
		withPorts(&localv1.ServicePort{Name: "http", Protocol: localv1.Protocol_UDP, Port: 53, TargetPort: 8080}),
		withEndpoints(&localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_UDP, Ip: podC, Port: 8080, Ready: true, Serving: true, InClusterSet: true}))
	self := service("default", "self", "10.96.0.14", withEndpoints(ep(podA, 8080, true)))
	remote := service("default", "remote", "10.96.0.15", withNodePort(30085), withEndpoints(ep(podC, 8080, false)))
	remote.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	internalLocal := service("default", "internal-local", "10.96.0.16", withEndpoints(ep(podC, 8080, false)))
	internalLocal.Service.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	n.sync(web, local, empty, sticky, dns, self, remote, internalLocal)

	t.Run("cluster IP from the node reaches every endpoint", func(t *testing.T) {
		got := answeredBy(t, &n.node.Host, netlab.TCP, ap("10.96.0.10:80"), 4)
		if got["pod-a"] != 2 || got["pod-c"] != 2 {
			t.Errorf("answers %v, want pod-a and pod-c twice each (rr)", got)
		}
	})
	t.Run("cluster IP from a pod reaches a remote endpoint, UDP too", func(t *testing.T) {
		pod := n.lab.Pod("pod-b")
		if got := answeredBy(t, &pod.Host, netlab.UDP, ap("10.96.0.53:53"), 2); got["pod-c"] != 2 {
			t.Errorf("UDP answers %v, want pod-c", got)
		}
		r := pod.TCP(ap("10.96.0.10:80"))
		if r.Outcome != netlab.OK {
			t.Fatalf("TCP from pod-b: %v", r)
		}
	})
	t.Run("a pod reaches itself through its service (hairpin, masqueraded)", func(t *testing.T) {
		pod := n.lab.Pod("pod-a")
		r := pod.TCP(ap("10.96.0.14:80"))
		if r.Outcome != netlab.OK || r.Pod != "pod-a" {
			t.Fatalf("pod-a to its own service: %v", r)
		}
		if r.Peer.Addr() == pod.IPv4 {
			t.Errorf("pod-a saw its own address %s: hairpin traffic must be masqueraded", r.Peer)
		}
	})
	t.Run("node port from outside, Cluster policy: masqueraded", func(t *testing.T) {
		got := map[string]int{}
		for range 4 {
			r := ext.TCP(ap("192.168.77.10:30080"))
			if r.Outcome != netlab.OK {
				t.Fatalf("node port: %v", r)
			}
			if r.Peer.Addr() == netlab.ExternalV4 {
				t.Errorf("%s saw the client's own address: Cluster policy masquerades", r.Pod)
			}
			got[r.Pod]++
		}
		if got["pod-a"] == 0 || got["pod-c"] == 0 {
			t.Errorf("answers %v, want both endpoints", got)
		}
	})
	t.Run("node port from outside, Local policy: local endpoints, client IP kept", func(t *testing.T) {
		for range 3 {
			r := ext.TCP(ap("192.168.77.10:30081"))
			if r.Outcome != netlab.OK || r.Pod != "pod-b" {
				t.Fatalf("node port Local: %v, want pod-b", r)
			}
			if r.Peer.Addr() != netlab.ExternalV4 {
				t.Errorf("pod-b saw %s, want the client's %s", r.Peer, netlab.ExternalV4)
			}
		}
	})
	t.Run("no endpoints: refused", func(t *testing.T) {
		for _, dst := range []netip.AddrPort{ap("10.96.0.12:80")} {
			if r := n.node.TCP(dst); r.Outcome != netlab.Refused {
				t.Errorf("%s: %v, want refused", dst, r)
			}
		}
		if r := ext.TCP(ap("192.168.77.10:30082")); r.Outcome != netlab.Refused {
			t.Errorf("node port without endpoints: %v, want refused", r)
		}
	})
	t.Run("Local policy, endpoints elsewhere only: dropped", func(t *testing.T) {
		if r := ext.Dial(netlab.TCP, ap("192.168.77.10:30085"), 500*time.Millisecond); r.Outcome != netlab.TimedOut {
			t.Errorf("node port Local without a local endpoint: %v, want dropped", r)
		}
		// From node-1 itself and from its pod: IPVS takes the node's own
		// packets before filter OUTPUT, which could not drop them.
		for _, h := range []*netlab.Host{&n.node.Host, &n.lab.Pod("pod-a").Host} {
			if r := h.Dial(netlab.TCP, ap("10.96.0.16:80"), 500*time.Millisecond); r.Outcome != netlab.TimedOut {
				t.Errorf("internalTrafficPolicy Local without a local endpoint, from %s: %v, want dropped", h.Name, r)
			}
		}
	})
	t.Run("a cluster IP answers only on its ports", func(t *testing.T) {
		if r := n.node.TCP(ap("10.96.0.10:81")); r.Outcome != netlab.Refused {
			t.Errorf("10.96.0.10:81: %v, want refused", r)
		}
	})
	t.Run("session affinity: one client, one endpoint", func(t *testing.T) {
		if got := answeredBy(t, &n.node.Host, netlab.TCP, ap("10.96.0.13:80"), 5); len(got) != 1 {
			t.Errorf("answers %v, want a single pod", got)
		}
	})
}

func TestLoadBalancerSourceRanges(t *testing.T) {
	n := startNode1(t, nil)
	ext := n.lab.External
	// The external client reaches the load balancer's address through
	// node-1, as a cloud load balancer would deliver it.
	if out, err := ext.Run("ip", "route", "add", "203.0.113.7/32", "via", "192.168.77.10"); err != nil {
		t.Fatalf("route: %v: %s", err, out)
	}
	lb := func(ranges ...string) *localv1.ServiceEndpoints {
		se := service("default", "lb", "10.96.0.20", withNodePort(30090), withEndpoints(ep(podA, 8080, true)))
		se.Service.LoadBalancerIps = []string{"203.0.113.7"}
		se.Service.LoadBalancerSourceRanges = ranges
		return se
	}
	n.sync(lb("192.168.77.100/32"))
	if r := ext.TCP(ap("203.0.113.7:80")); r.Outcome != netlab.OK {
		t.Fatalf("from within the source ranges: %v", r)
	}
	n.sync(lb("198.51.100.0/24"))
	if r := ext.Dial(netlab.TCP, ap("203.0.113.7:80"), 500*time.Millisecond); r.Outcome != netlab.TimedOut {
		t.Errorf("from outside the source ranges: %v, want dropped", r)
	}
	n.sync(lb())
	if r := ext.TCP(ap("203.0.113.7:80")); r.Outcome != netlab.OK {
		t.Errorf("without source ranges: %v", r)
	}
}

// dialHeld connects from h to dst and reads the greeting: the pod that
// answered, and the connection, left open.
func dialHeld(t *testing.T, h *netlab.Host, dst netip.AddrPort) (string, *net.TCPConn) {
	t.Helper()
	var c net.Conn
	if err := h.Do(func() (err error) { c, err = net.DialTimeout("tcp", dst.String(), 2*time.Second); return }); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("greeting: %v", err)
	}
	return strings.Fields(line)[0], c.(*net.TCPConn)
}

func TestEndpointGoneDrainsGracefully(t *testing.T) {
	n := startNode1(t, nil)
	web := func(eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
		return service("default", "web", "10.96.0.10", withEndpoints(eps...))
	}
	n.sync(web(ep(podA, 8080, true), ep(podC, 8080, false)))

	// A connection to pod-c, held open.
	var held *net.TCPConn
	for range 2 {
		pod, c := dialHeld(t, &n.node.Host, ap("10.96.0.10:80"))
		if pod == "pod-c" {
			held = c
			break
		}
		c.Close()
	}
	if held == nil {
		t.Fatal("no connection reached pod-c in two tries (rr)")
	}
	defer held.Close()

	n.sync(web(ep(podA, 8080, true)))
	want := []string{"10.244.1.10:8080 w=1", "10.244.2.10:8080 w=0"}
	if got := n.dests("10.96.0.10:80"); !slices.Equal(got, want) {
		t.Fatalf("real servers %q, want %q (pod-c drains with weight 0)", got, want)
	}
	if got := answeredBy(t, &n.node.Host, netlab.TCP, ap("10.96.0.10:80"), 4); got["pod-a"] != 4 {
		t.Errorf("new connections went to %v, want pod-a only", got)
	}
	// The held connection still works.
	held.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(held, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(held).ReadString('\n'); err != nil || !strings.HasPrefix(line, "pod-c ") {
		t.Fatalf("held connection: %q, %v", line, err)
	}
	// Periodic syncs keep pod-c while its connection lasts.
	n.syncChanges(stateOf(web(ep(podA, 8080, true))), backend.Changes{Resync: true})
	if got := n.dests("10.96.0.10:80"); !slices.Equal(got, want) {
		t.Fatalf("after a periodic sync with the connection open: %q, want %q", got, want)
	}
	// Reset: IPVS's entry leaves CLOSE after 10 s; then a periodic sync
	// removes pod-c.
	held.SetLinger(0)
	held.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		n.syncChanges(stateOf(web(ep(podA, 8080, true))), backend.Changes{Resync: true})
		got := n.dests("10.96.0.10:80")
		if slices.Equal(got, []string{"10.244.1.10:8080 w=1"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod-c not removed a minute after its connection ended: %q", got)
		}
		time.Sleep(time.Second) // IPVS tells no event when a connection expires: poll
	}
}

func TestRestartKeepsTrafficAndRemovesStale(t *testing.T) {
	n := startNode1(t, nil)
	web := service("default", "web", "10.96.0.10", withEndpoints(ep(podA, 8080, true)))
	gone := service("default", "gone", "10.96.0.99", withEndpoints(ep(podC, 8080, false)))
	n.sync(web, gone)

	// A new process (a restart, or kpng replacing kube-proxy's ipvs mode):
	// a new Backend whose first sync is a Reset without "gone".
	n.b = New(n.b.cfg, n.c, &hostKernel{})
	n.prev = map[backend.ServiceKey]bool{}
	n.sync(web)
	if r := n.node.TCP(ap("10.96.0.10:80")); r.Outcome != netlab.OK || r.Pod != "pod-a" {
		t.Errorf("web after the restart: %v", r)
	}
	list, err := listServices(n.c)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Address != netip.MustParseAddr("10.96.0.10") {
		t.Errorf("virtual servers after the restart: %v, want only 10.96.0.10:80", list)
	}
	if r := n.node.Dial(netlab.TCP, ap("10.96.0.99:80"), 500*time.Millisecond); r.Outcome == netlab.OK {
		t.Errorf("the stale service still answers: %v", r)
	}
	// Cleanup leaves nothing.
	err = n.node.Do(func() error {
		if err := cleanupIPVS(n.b.cfg, n.c, &hostKernel{}); err != nil {
			return err
		}
		return cleanupRules(context.Background(), &hostKernel{})
	})
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := listServices(n.c); len(list) != 0 {
		t.Errorf("virtual servers after cleanup: %v", list)
	}
	if out, err := n.node.Run("ipset", "list", "-n"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("ipsets after cleanup: %q, %v", out, err)
	}
}

func TestDummyDeletedAsksForARepair(t *testing.T) {
	n := startNode1(t, nil)
	web := service("default", "web", "10.96.0.10", withEndpoints(ep(podA, 8080, true)))
	n.sync(web)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resyncNow := make(chan struct{}, 1)
	if err := n.node.Do(func() error { return watchDummy(ctx, resyncNow) }); err != nil {
		t.Fatal(err)
	}
	// What removing kube-proxy's leftovers does: ipvsadm -C, and
	// kube-ipvs0 deleted.
	if out, err := n.node.Run("ipvsadm", "-C"); err != nil {
		t.Fatalf("ipvsadm -C: %v: %s", err, out)
	}
	if out, err := n.node.Run("ip", "link", "del", DummyInterface); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	select {
	case <-resyncNow:
	case <-time.After(10 * time.Second):
		t.Fatal("no resync asked for 10s after kube-ipvs0 was deleted")
	}
	n.syncChanges(stateOf(web), backend.Changes{Resync: true})
	if !n.b.LastSyncFull() {
		t.Error("the resync did not rewrite IPVS")
	}
	if r := n.node.TCP(ap("10.96.0.10:80")); r.Outcome != netlab.OK || r.Pod != "pod-a" {
		t.Errorf("web after the repair: %v", r)
	}
}
