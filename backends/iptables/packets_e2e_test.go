//go:build e2e

package iptables

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// Real packets through to-iptables for what the shared suite
// (test/e2e/services) does not cover: every detect-local mode, and
// localhost node ports with the CVE-2020-8558 protection. Each test runs
// kpng in node-1 of a netlab lab (its own namespaces) and observes what a
// user would: who answered, the source address the pod saw, or a drop.

const (
	packetsAnswer = time.Second
	packetsDrop   = 300 * time.Millisecond
	packetsSettle = 10 * time.Second
	packetsSync   = time.Minute
)

// startKpng runs to-iptables in node with cfg, returning after its first
// sync. stop ends it and removes its rules (--cleanup), so the next run in
// the same node starts from clean tables.
func startKpng(t *testing.T, node *netlab.Node, state *netlab.State, cfg netlab.ProxyConfig) (stop func()) {
	t.Helper()
	b := netlab.Kpng("iptables")
	p := b.Start(t, node, state.Path, cfg)
	p.WaitOutput(t, b.SyncedLine(), packetsSync)
	return func() {
		t.Helper()
		if err := p.Stop(); err != nil {
			t.Errorf("stop kpng: %v", err)
		}
		b.Cleanup(t, node, state.Path, cfg)
	}
}

func famName(fam int) string { return fmt.Sprintf("IPv%d", fam) }

// localhostDaemon is a UDP daemon of a node bound to 127.0.0.1, as a node
// daemon with a local-only control port: it counts the datagrams that reach
// it from outside 127.0.0.0/8. One datagram reaching it is the
// CVE-2020-8558 exposure (a reply need not come back for the harm).
type localhostDaemon struct{ fromOutside, fromLoopback atomic.Int64 }

func serveLocalhost(t *testing.T, h *netlab.Host, port int) *localhostDaemon {
	t.Helper()
	var c net.PacketConn
	err := h.Do(func() error {
		var err error
		c, err = net.ListenPacket("udp4", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d := &localhostDaemon{}
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := c.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			if a, ok := from.(*net.UDPAddr); ok && !a.IP.IsLoopback() {
				d.fromOutside.Add(1)
			} else {
				d.fromLoopback.Add(1)
			}
		}
	}()
	return d
}

// sendFrom sends n datagrams to dst from h's namespace, 20 ms apart.
func sendFrom(t *testing.T, h *netlab.Host, dst netip.AddrPort, n int) {
	t.Helper()
	var c net.Conn
	if err := h.Do(func() error {
		var err error
		c, err = net.Dial("udp4", dst.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range n {
		if _, err := c.Write([]byte("attack\n")); err != nil {
			t.Fatalf("%s: send to %s: %v", h.Name, dst, err)
		}
		time.Sleep(20 * time.Millisecond) // pacing, not a wait for a condition
	}
}

// TestPacketsLocalhostNodePorts: node ports answer on 127.0.0.1 from the
// node itself (route_localnet=1, set by kpng), while a neighbour that sends
// packets for 127.0.0.1 to the node cannot reach a daemon bound to
// localhost there (CVE-2020-8558: route_localnet alone lets it; the
// KPNG-FIREWALL rule drops it). The exposure is first shown with
// route_localnet=1 and no rules, so the drop is the rule's doing. With
// --localhost-nodeports=false, 127.0.0.1 accepts no node port.
func TestPacketsLocalhostNodePorts(t *testing.T) {
	lab, state := nodePortLab(t, 30090)
	n1, ext := lab.Node("node-1"), lab.External

	const daemonPort = 9099
	daemon := serveLocalhost(t, &n1.Host, daemonPort)
	// The neighbour routes 127.0.0.0/8 to node-1, as an attacker on the
	// node's network can: its own loopback routes go, and route_localnet
	// lets it send such packets on eth0.
	for _, argv := range [][]string{
		{"ip", "route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local"},
		{"ip", "route", "del", "local", "127.0.0.1", "dev", "lo", "table", "local"},
		{"ip", "route", "add", "127.0.0.0/8", "via", n1.IPv4.String()},
		{"sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1", "net.ipv4.conf." + netlab.NodeInterface + ".route_localnet=1"},
	} {
		if out, err := ext.Run(argv...); err != nil {
			t.Fatalf("external: %v: %v\n%s", argv, err, out)
		}
	}
	target := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), daemonPort)

	// Control: with route_localnet=1 and no rules, the neighbour reaches
	// the daemon.
	if out, err := n1.Run("sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1"); err != nil {
		t.Fatalf("node-1 route_localnet: %v\n%s", err, out)
	}
	for end := time.Now().Add(packetsSettle); daemon.fromOutside.Load() == 0; {
		if time.Now().After(end) {
			t.Fatal("control failed: with route_localnet=1 and no rules, the neighbour's datagrams for 127.0.0.1 never reached node-1's daemon; the test cannot show the protection")
		}
		sendFrom(t, ext, target, 5)
	}
	if out, err := n1.Run("sysctl", "-qw", "net.ipv4.conf.all.route_localnet=0"); err != nil {
		t.Fatalf("node-1 route_localnet: %v\n%s", err, out)
	}

	t.Run("on", func(t *testing.T) {
		stop := startKpng(t, n1, state, netlab.ProxyConfig{})
		defer stop()
		if v, err := n1.NS.ReadSysctl("net/ipv4/conf/all/route_localnet"); err != nil || v != "1" {
			t.Fatalf("kpng did not set route_localnet=1: %q %v", v, err)
		}
		nodePort := netip.MustParseAddrPort("127.0.0.1:30090")
		netlab.Eventually(t, packetsSettle, func() netlab.Result { return n1.Dial(netlab.TCP, nodePort, packetsAnswer) }, netlab.Answered("pod-c"))
		checkServers(t, n1, ext)
		// kube-proxy's nfacct metric counted the connection to the
		// localhost node port (its first packet: the rule is in nat).
		m := getAll(t, &n1.Host, "http://127.0.0.1:10249/metrics")
		if !regexp.MustCompile(`(?m)^kubeproxy_iptables_localhost_nodeports_accepted_packets_total [1-9]`).MatchString(m) {
			t.Errorf("/metrics: kubeproxy_iptables_localhost_nodeports_accepted_packets_total is not above 0 after a connection to 127.0.0.1:30090")
		}
		if !regexp.MustCompile(`(?m)^kubeproxy_iptables_ct_state_invalid_dropped_packets_total [0-9]`).MatchString(m) {
			t.Errorf("/metrics lacks kubeproxy_iptables_ct_state_invalid_dropped_packets_total")
		}
		before := daemon.fromOutside.Load()
		sendFrom(t, ext, target, 20)
		// The node's own datagram, sent after them, reaches the daemon;
		// once it is read, so is anything of the neighbour's before it.
		marks := daemon.fromLoopback.Load()
		sendFrom(t, &n1.Host, target, 1)
		for end := time.Now().Add(packetsSettle); daemon.fromLoopback.Load() == marks; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("node-1's own datagram to its localhost daemon was not received")
			}
		}
		if got := daemon.fromOutside.Load() - before; got != 0 {
			t.Errorf("%d of the neighbour's 20 datagrams for 127.0.0.1:%d reached node-1's daemon; want none (CVE-2020-8558)", got, daemonPort)
		}
	})

	t.Run("off", func(t *testing.T) {
		stop := startKpng(t, n1, state, netlab.ProxyConfig{Extra: []string{"--localhost-nodeports=false"}})
		defer stop()
		// The node port still answers on the node's address...
		netlab.Eventually(t, packetsSettle, func() netlab.Result {
			return n1.Dial(netlab.TCP, netip.AddrPortFrom(n1.IPv4, 30090), packetsAnswer)
		}, netlab.Answered("pod-c"))
		// ...but not on 127.0.0.1, where nothing listens.
		nodePort := netip.MustParseAddrPort("127.0.0.1:30090")
		for range 3 {
			if r := n1.Dial(netlab.TCP, nodePort, packetsAnswer); r.Outcome != netlab.Refused {
				t.Errorf("node-1 -> 127.0.0.1:30090 with --localhost-nodeports=false: %v; want refused", r)
			}
		}
	})
}

// checkServers checks what kpng serves beside the rules, at kube-proxy's
// default addresses: /healthz on every address (here from the neighbour),
// and /metrics and /proxyMode on the node's loopback, with the iptables
// metrics of a sync that wrote rules.
func checkServers(t *testing.T, n1 *netlab.Node, ext *netlab.Host) {
	t.Helper()
	hz := ext.HTTPGet(fmt.Sprintf("http://%s/healthz", netip.AddrPortFrom(n1.IPv4, 10256)), packetsAnswer)
	if hz.Outcome != netlab.OK || hz.Status != 200 || !strings.Contains(hz.Body, "lastUpdated") {
		t.Errorf("GET node-1:10256/healthz from the neighbour: %v; want HTTP 200 with kube-proxy's JSON", hz)
	}
	if r := n1.HTTPGet("http://127.0.0.1:10249/proxyMode", packetsAnswer); r.Outcome != netlab.OK || strings.TrimSpace(r.Body) != "iptables" {
		t.Errorf("GET 127.0.0.1:10249/proxyMode: %v; want iptables", r)
	}
	m := getAll(t, &n1.Host, "http://127.0.0.1:10249/metrics")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_iptables_total\{ip_family="IPv4",table="nat"\} [1-9][0-9]*$`),
		regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_iptables_total\{ip_family="IPv6",table="filter"\} [1-9][0-9]*$`),
		regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} [1-9]`),
	} {
		if !want.MatchString(m) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "kubeproxy_sync_proxy_rules_") && !strings.Contains(l, "_bucket") {
				t.Log(l)
			}
		}
	}
}

// getAll GETs url from inside h's namespace and returns the whole body
// (netlab's HTTPGet keeps 64 KiB, less than /metrics).
func getAll(t *testing.T, h *netlab.Host, url string) string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := h.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s in %s: %v", url, h.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s in %s: HTTP %d, %v", url, h.Name, resp.StatusCode, err)
	}
	return string(b)
}

// nodePortLab is a lab whose state holds one NodePort service, "np" (port
// 80, node port nodePort, Cluster policy), served by pod-c on 8080.
func nodePortLab(t *testing.T, nodePort int32) (*netlab.Lab, *netlab.State) {
	t.Helper()
	lab := netlab.New(t, netlab.DefaultSpec())
	state := netlab.NewState(t, lab)
	np := state.AddService("np", netlab.TCPPort("tcp", 80, 8080))
	np.Spec.Type = corev1.ServiceTypeNodePort
	np.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	np.Spec.Ports[0].NodePort = nodePort
	state.SetEndpoints(np, netlab.Ready(lab.Pod("pod-c"))...)
	state.Write(t)
	return lab, state
}

// TestPacketsNodePortAddressesFollowInterfaces: with --nodeport-addresses
// CIDRs, an address added to the node inside them accepts node ports
// within a periodic sync (not only at the hourly full sync).
func TestPacketsNodePortAddressesFollowInterfaces(t *testing.T) {
	lab, state := nodePortLab(t, 30091)
	n1, ext := lab.Node("node-1"), lab.External
	const period = 2 * time.Second
	stop := startKpng(t, n1, state, netlab.ProxyConfig{
		NodePortAddresses: []string{"192.168.77.0/24", "fd00:77::/64"},
		SyncPeriod:        period,
	})
	defer stop()

	for _, added := range []netip.Addr{netip.MustParseAddr("192.168.77.50"), netip.MustParseAddr("fd00:77::50")} {
		bits := 24
		if added.Is6() {
			bits = 64
		}
		dst := netip.AddrPortFrom(added, 30091)
		dial := func() netlab.Result { return ext.Dial(netlab.TCP, dst, packetsAnswer) }
		netlab.Eventually(t, packetsSettle, func() netlab.Result {
			return ext.Dial(netlab.TCP, netip.AddrPortFrom(n1.Addr(map[bool]int{false: 4, true: 6}[added.Is6()]), 30091), packetsAnswer)
		}, netlab.Answered("pod-c"))
		// The address exists nowhere yet: nothing answers.
		if r := ext.Dial(netlab.TCP, dst, packetsDrop); r.Outcome == netlab.OK {
			t.Fatalf("%s answered before it was added: %v", dst, r)
		}
		prefix := netip.PrefixFrom(added, bits).String()
		if out, err := n1.Run("ip", "addr", "add", prefix, "dev", netlab.NodeInterface, "nodad"); err != nil {
			t.Fatalf("add %s: %v\n%s", prefix, err, out)
		}
		// Within a few periodic syncs, the new address accepts the node port.
		netlab.Eventually(t, 3*period+packetsSettle, dial, netlab.Answered("pod-c"))
		if out, err := n1.Run("ip", "addr", "del", prefix, "dev", netlab.NodeInterface); err != nil {
			t.Fatalf("del %s: %v\n%s", prefix, err, out)
		}
	}
}
