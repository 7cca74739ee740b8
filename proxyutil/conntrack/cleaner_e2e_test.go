//go:build e2e

package conntrack

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"
)

// The lab, all inside one private network namespace, on its loopback:
//
//	service 10.96.0.10, UDP port "a" 53 and "b" 54, node port 30053 (of "a")
//	nft output DNAT, as a proxy would have written it before the change:
//	  10.96.0.10:53    -> 127.0.0.2:5353  stale: the state's endpoint is now 127.0.0.3:5353
//	  10.96.0.10:54    -> 127.0.0.4:5354  current
//	  *:30053          -> 127.0.0.2:5353  stale (node port of "a")
//	  10.96.0.10:55    -> 127.0.0.2:5355  port "c", no serving endpoint now: left alone
//	  10.96.0.10:53/tcp-> 127.0.0.2:5353  TCP: never touched
//	plus a UDP flow to 127.0.0.5:9999 with no DNAT.
const ruleset = `
table ip kpngcttest {
	chain out {
		type nat hook output priority -100; policy accept;
		ip daddr 10.96.0.10 udp dport 53 dnat to 127.0.0.2:5353
		ip daddr 10.96.0.10 udp dport 54 dnat to 127.0.0.4:5354
		ip daddr 10.96.0.10 udp dport 55 dnat to 127.0.0.2:5355
		ip daddr 10.96.0.10 tcp dport 53 dnat to 127.0.0.2:5353
		udp dport 30053 dnat to 127.0.0.2:5353
	}
}
`

func labState() *backend.State {
	st := backend.NewState("n1")
	v4 := localv1.IPFamily_IPV4
	udpEP := func(port, ip string, p int32, serving bool) *localv1.Endpoint {
		return &localv1.Endpoint{PortName: port, Protocol: localv1.Protocol_UDP, Ip: ip, Port: p, Ready: serving, Serving: serving}
	}
	st.Services[backend.ServiceKey{Namespace: "ns", Name: "svc", Family: v4}] = &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: "svc", Family: v4, ClusterIp: "10.96.0.10",
			Ports: []*localv1.ServicePort{
				{Name: "a", Protocol: localv1.Protocol_UDP, Port: 53, NodePort: 30053},
				{Name: "b", Protocol: localv1.Protocol_UDP, Port: 54},
				{Name: "c", Protocol: localv1.Protocol_UDP, Port: 55},
				{Name: "t", Protocol: localv1.Protocol_TCP, Port: 53},
			}},
		Endpoints: []*localv1.Endpoint{
			udpEP("a", "127.0.0.3", 5353, true),
			udpEP("b", "127.0.0.4", 5354, true),
			udpEP("c", "127.0.0.2", 5355, false),
			{PortName: "t", Protocol: localv1.Protocol_TCP, Ip: "127.0.0.3", Port: 5353, Ready: true, Serving: true},
		},
	}
	return st
}

type flowKey struct {
	proto        uint8
	dst          string
	dport        uint16
	replySrc     string
	replySrcPort uint16
}

func keys(flows []*netlink.ConntrackFlow) []flowKey {
	var out []flowKey
	for _, f := range flows {
		if f.Forward.Protocol != unix.IPPROTO_UDP && f.Forward.Protocol != unix.IPPROTO_TCP {
			continue
		}
		out = append(out, flowKey{f.Forward.Protocol, f.Forward.DstIP.String(), f.Forward.DstPort, f.Reverse.SrcIP.String(), f.Reverse.SrcPort})
	}
	slices.SortFunc(out, func(a, b flowKey) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

// closedAtEnd returns a function that keeps a socket (or anything) to be
// closed when t ends.
func closedAtEnd(t *testing.T) func(io.Closer) {
	var mu sync.Mutex
	var closers []io.Closer
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range closers {
			c.Close()
		}
	})
	return func(c io.Closer) {
		mu.Lock()
		defer mu.Unlock()
		closers = append(closers, c)
	}
}

// acceptAll listens on TCP address addr, in the calling thread's
// namespace, and accepts every connection, each kept (to be closed).
func acceptAll(addr string, keep func(io.Closer)) error {
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		return err
	}
	keep(l)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			keep(c)
		}
	}()
	return nil
}

// conntrackOf opens lab's namespace and a netlink socket to its
// conntrack table, both closed when t ends.
func conntrackOf(t *testing.T, lab *netnstest.Netns) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	ns, err := netns.GetFromPath(lab.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return ns, h
}

func TestCleanDeletesExactlyTheStaleFlows(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft is needed to install the lab's DNAT rules: %v", err)
	}
	// Every socket of the lab, closed at the end (the namespace lives as
	// long as one of them does).
	keep := closedAtEnd(t)
	lab := netnstest.New(t, "ct")
	err := lab.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		// The service IP must be routable for the output hook to see it.
		addr, _ := netlink.ParseAddr("10.96.0.10/32")
		if err := netlink.AddrAdd(lo, addr); err != nil {
			return err
		}
		// nft runs in this thread's namespace: a child inherits it.
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(ruleset)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft: %w: %s", err, out)
		}
		// Endpoints that answer, so that the flows are real conversations.
		for _, a := range []string{"127.0.0.2:5353", "127.0.0.4:5354", "127.0.0.2:5355", "127.0.0.5:9999"} {
			pc, err := net.ListenPacket("udp4", a)
			if err != nil {
				return err
			}
			keep(pc)
			go func() {
				buf := make([]byte, 64)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					_, _ = pc.WriteTo(buf[:n], from)
				}
			}()
		}
		if err := acceptAll("127.0.0.2:5353", keep); err != nil {
			return err
		}
		for _, dst := range []string{"10.96.0.10:53", "10.96.0.10:54", "10.96.0.10:55", "127.0.0.1:30053", "127.0.0.5:9999"} {
			c, err := net.Dial("udp4", dst)
			if err != nil {
				return err
			}
			keep(c)
			if _, err := c.Write([]byte("ping")); err != nil {
				return fmt.Errorf("send to %s: %w", dst, err)
			}
			buf := make([]byte, 64)
			if _, err := c.Read(buf); err != nil {
				return fmt.Errorf("answer from %s: %w", dst, err)
			}
		}
		c, err := net.Dial("tcp4", "10.96.0.10:53")
		if err != nil {
			return fmt.Errorf("tcp: %w", err)
		}
		keep(c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ns, h := conntrackOf(t, lab)
	list := func() []flowKey {
		t.Helper()
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		if err != nil {
			t.Fatalf("list conntrack: %v", err)
		}
		return keys(flows)
	}
	udp, tcp := uint8(unix.IPPROTO_UDP), uint8(unix.IPPROTO_TCP)
	stale := []flowKey{
		{udp, "10.96.0.10", 53, "127.0.0.2", 5353},
		{udp, "127.0.0.1", 30053, "127.0.0.2", 5353},
	}
	kept := []flowKey{
		{udp, "10.96.0.10", 54, "127.0.0.4", 5354},
		{udp, "10.96.0.10", 55, "127.0.0.2", 5355},
		{udp, "127.0.0.5", 9999, "127.0.0.5", 9999},
		{tcp, "10.96.0.10", 53, "127.0.0.2", 5353},
	}
	before := list()
	for _, k := range append(slices.Clone(stale), kept...) {
		if !slices.Contains(before, k) {
			t.Fatalf("the lab did not create flow %+v; table: %+v", k, before)
		}
	}

	c, err := NewCleanerAt(localv1.IPFamily_IPV4, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Clean(labState())
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != len(stale) {
		t.Errorf("deleted %d flows, want %d", res.Deleted, len(stale))
	}
	after := list()
	for _, k := range stale {
		if slices.Contains(after, k) {
			t.Errorf("stale flow %+v survived", k)
		}
	}
	for _, k := range kept {
		if !slices.Contains(after, k) {
			t.Errorf("flow %+v was deleted", k)
		}
	}
	if len(after) != len(before)-len(stale) {
		t.Errorf("table went from %d to %d flows, want %d fewer:\nbefore %+v\nafter  %+v", len(before), len(after), len(stale), before, after)
	}
	t.Logf("%d flows listed, %d stale deleted in %v", len(before), res.Deleted, res.Duration)

	// Nothing left to do: a second cleanup deletes nothing.
	if res, err := c.Clean(labState()); err != nil || res.Deleted != 0 {
		t.Errorf("second cleanup: %+v, %v", res, err)
	}
}

// A TCP handshake made while the service's rules were missing (but the NAT
// hook was there, so conntrack gave it a null binding) is never NATed:
// once the rules are back, a client reusing its tuple is not NATed either,
// until the entry expires. A full sync's cleanup deletes it (and
// nothing NATed); other syncs leave TCP alone.
//
// The lab, in one private namespace: service 10.96.0.30:80, routed to a
// veth (with a made-up neighbor) whose peer, in the same namespace, does
// not forward: a SYN vanishes there, after conntrack confirmed its entry,
// as long as no DNAT rule exists. Its
// endpoint 10.98.0.2:8080 on the loopback; the client's address 10.99.0.1.
func TestFullSyncDeletesHandshakesNeverNATed(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft is needed to install the lab's DNAT rule: %v", err)
	}
	lab := netnstest.New(t, "cths")
	if err := lab.IPBatch(
		"link add kpngct0 type veth peer name kpngct1",
		"link set kpngct0 up",
		"link set kpngct1 up",
		"addr add 10.99.0.1/32 dev kpngct0",
		"route add 10.96.0.30/32 dev kpngct0 src 10.99.0.1",
		"neigh replace 10.96.0.30 lladdr 02:00:00:00:00:01 dev kpngct0 nud permanent",
		"addr add 10.98.0.2/32 dev lo",
	); err != nil {
		t.Fatal(err)
	}
	keep := closedAtEnd(t)
	if err := lab.Do(func() error { return acceptAll("10.98.0.2:8080", keep) }); err != nil {
		t.Fatal(err)
	}
	const port = 40123 // the client's source port, reused
	dial := func(localPort int, timeout time.Duration) error {
		return lab.Do(func() error {
			d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.IPv4(10, 99, 0, 1), Port: localPort}}
			c, err := d.Dial("tcp4", "10.96.0.30:80")
			if err != nil {
				return err
			}
			keep(c)
			return nil
		})
	}
	// The table's NAT hook exists, its service rule is missing (a chain
	// flushed, a rule deleted), and a rule of the table uses conntrack
	// (as a proxy's masquerade and ct state rules do; an empty NAT chain
	// alone does not enable it): the first SYN gets conntrack's null
	// binding, and vanishes.
	if out, err := lab.RunInput(`table ip kpngcths {
	chain out {
		type nat hook output priority -100; policy accept;
	}
	chain filter-out {
		type filter hook output priority 0; policy accept;
		ct state invalid drop
	}
}
`, "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	if err := dial(port, 300*time.Millisecond); err == nil {
		t.Fatal("the SYN sent before the rule existed was answered: the lab has no black hole")
	}
	if out, err := lab.Run("nft", "add", "rule", "ip", "kpngcths", "out", "ip", "daddr", "10.96.0.30", "tcp", "dport", "80", "dnat", "to", "10.98.0.2:8080"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	// The rule works for a new tuple, and that NATed flow must survive.
	if err := dial(port+1, 5*time.Second); err != nil {
		t.Fatalf("a new tuple through the rule: %v", err)
	}
	// The premise: the old tuple meets its un-NATed entry and is lost.
	if err := dial(port, time.Second); err == nil {
		out, _ := lab.Run("conntrack", "-L")
		t.Fatalf("the reused tuple was answered although its entry was never NATed: the kernel no longer shows the problem this test guards\n%s", out)
	}

	ns, h := conntrackOf(t, lab)
	tcp := uint8(unix.IPPROTO_TCP)
	neverNATed := flowKey{tcp, "10.96.0.30", 80, "10.96.0.30", 80}
	natted := flowKey{tcp, "10.96.0.30", 80, "10.98.0.2", 8080}
	has := func(k flowKey) bool {
		t.Helper()
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		if err != nil {
			t.Fatalf("list conntrack: %v", err)
		}
		return slices.Contains(keys(flows), k)
	}
	if !has(neverNATed) || !has(natted) {
		t.Fatalf("the lab did not make both flows (never NATed %v, NATed %v)", has(neverNATed), has(natted))
	}

	st := backend.NewState("n1")
	k := backend.ServiceKey{Namespace: "ns", Name: "web", Family: localv1.IPFamily_IPV4}
	st.Services[k] = &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: "web", Family: localv1.IPFamily_IPV4, ClusterIp: "10.96.0.30",
			Ports: []*localv1.ServicePort{{Name: "http", Protocol: localv1.Protocol_TCP, Port: 80}}},
		Endpoints: []*localv1.Endpoint{{PortName: "http", Protocol: localv1.Protocol_TCP, Ip: "10.98.0.2", Port: 8080, Ready: true, Serving: true}},
	}
	c, err := NewCleanerAt(localv1.IPFamily_IPV4, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Set: []backend.ServiceKey{k}}})
	if !has(neverNATed) {
		t.Fatal("a sync of changes deleted a TCP flow")
	}
	c.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Resync: true}, Full: true})
	if has(neverNATed) {
		t.Error("the handshake never NATed survived a full sync's cleanup")
	}
	if !has(natted) {
		t.Error("the full sync's cleanup deleted a NATed flow")
	}
	if err := dial(port, 5*time.Second); err != nil {
		t.Errorf("the reused tuple after the cleanup: %v", err)
	}
}
