//go:build e2e

package netlab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// staticNft is a stand-in backend for proving the harness: its "cluster
// state" is an nft ruleset, which it loads into the node and then idles like a
// proxy would. Real backends read cluster state (see Kpng).
type staticNft struct{}

func (staticNft) Name() string       { return "static-nft" }
func (staticNft) SyncedLine() string { return "synced" }

func (staticNft) Start(t testing.TB, node *Node, stateFile string, _ ProxyConfig) *Process {
	return node.Start(t, "sh", "-c", `nft -f "$1" && echo synced && exec sleep 1000000`, "static-nft", stateFile)
}

func (staticNft) Cleanup(t testing.TB, node *Node, _ string, _ ProxyConfig) {
	if out, err := node.Run("nft", "delete", "table", "inet", "static-proxy"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// serviceRules DNATs a dual-stack "service" (10.96.0.10 and fd00:96::10,
// port 80, TCP and UDP) to port 8080 of endpoints, chosen at random, from
// pods (prerouting) and from the node itself (output). Like kube-proxy, it
// masquerades hairpin traffic (a pod reaching itself through the service):
// otherwise the pod receives a packet from its own address, which its kernel
// drops as a martian.
func serviceRules(endpoints []*Pod) string {
	var b strings.Builder
	b.WriteString("table inet static-proxy {\n")
	b.WriteString("\tchain prerouting {\n\t\ttype nat hook prerouting priority -100; jump services\n\t}\n")
	b.WriteString("\tchain output {\n\t\ttype nat hook output priority -100; jump services\n\t}\n")
	b.WriteString("\tchain postrouting {\n\t\ttype nat hook postrouting priority 100; meta mark & 0x4000 != 0 masquerade\n\t}\n")
	for _, fam := range []int{4, 6} {
		ip := "ip"
		if fam == 6 {
			ip = "ip6"
		}
		var vmap []string
		for i, p := range endpoints {
			chain := fmt.Sprintf("ep-%s-v%d", p.Name, fam)
			vmap = append(vmap, fmt.Sprintf("%d : jump %s", i, chain))
			addr := p.Addr(fam).String()
			if fam == 6 {
				addr = "[" + addr + "]"
			}
			fmt.Fprintf(&b, "\tchain %s {\n\t\t%s saddr %s meta mark set meta mark | 0x4000\n\t\tmeta l4proto tcp dnat %s to %s:8080\n\t\tmeta l4proto udp dnat %s to %s:8080\n\t}\n", chain, ip, p.Addr(fam), ip, addr, ip, addr)
		}
		fmt.Fprintf(&b, "\tchain svc-v%d {\n\t\tnumgen random mod %d vmap { %s }\n\t}\n", fam, len(endpoints), strings.Join(vmap, ", "))
	}
	b.WriteString("\tchain services {\n")
	b.WriteString("\t\tip daddr 10.96.0.10 th dport 80 jump svc-v4\n")
	b.WriteString("\t\tip6 daddr fd00:96::10 th dport 80 jump svc-v6\n")
	b.WriteString("\t}\n}\n")
	return b.String()
}

// TestBackend runs a suite the way backend suites will: start the backend on
// every node, wait for it, then assert what clients observe: load spread over
// a local and a remote endpoint, and client addresses preserved.
func TestBackend(t *testing.T) {
	for _, b := range []Backend{staticNft{}} {
		t.Run(b.Name(), func(t *testing.T) {
			l := New(t, DefaultSpec())
			endpoints := []*Pod{l.Pod("pod-b"), l.Pod("pod-c")}
			state := filepath.Join(t.TempDir(), "rules.nft")
			if err := os.WriteFile(state, []byte(serviceRules(endpoints)), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, n := range l.Nodes {
				p := b.Start(t, n, state, ProxyConfig{})
				p.WaitOutput(t, b.SyncedLine(), 10*time.Second)
			}
			n1 := l.Node("node-1")
			if !n1.BrNetfilter {
				t.Fatal("kernel lacks br_netfilter: pod-a cannot reach pod-b (same bridge) through a service")
			}
			clients := []*Host{&l.Pod("pod-a").Host, &n1.Host, &l.Pod("pod-c").Host}
			for _, c := range clients {
				for _, vip := range []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:80"), netip.MustParseAddrPort("[fd00:96::10]:80")} {
					for _, proto := range []Protocol{TCP, UDP} {
						t.Run(fmt.Sprintf("%s/%s/%s", c.Name, vip, proto), func(t *testing.T) {
							dial := func() Result { return c.Dial(proto, vip, DefaultTimeout) }
							Eventually(t, 5*time.Second, dial, Answered("pod-b", "pod-c"))
							got := map[string]int{}
							for range 40 {
								r := dial()
								switch {
								case r.Outcome != OK:
								case r.Pod == c.Name:
									// Hairpin: masqueraded to the node's bridge address.
									if gw := n2Gateway(l, vip.Addr()); r.Peer.Addr() != gw {
										t.Errorf("hairpin: %s saw %s, want the bridge address %s", r.Pod, r.Peer, gw)
									}
								case r.Peer.Addr() != r.Local.Addr():
									t.Errorf("%s saw %s, client is %s: unexpected SNAT", r.Pod, r.Peer, r.Local)
								}
								got[r.Pod+"<"+r.Outcome.String()+">"]++
							}
							if len(got) != 2 || got["pod-b<ok>"] == 0 || got["pod-c<ok>"] == 0 {
								t.Errorf("want answers from pod-b and pod-c only, got %v", got)
							}
						})
					}
				}
			}
		})
	}
}

// n2Gateway is node-2's pod-bridge address of vip's family: what a
// masqueraded hairpin connection of pod-c comes from.
func n2Gateway(l *Lab, vip netip.Addr) netip.Addr {
	if vip.Is4() {
		return l.Node("node-2").GatewayV4
	}
	return l.Node("node-2").GatewayV6
}

// TestBrNetfilterNeededForSameNodeService documents why nodes get
// bridge-nf-call-iptables=1: without it, a pod's reply to a same-bridge
// client bypasses conntrack, is not un-DNATed, and the client never gets an
// answer from the address it dialed.
func TestBrNetfilterNeededForSameNodeService(t *testing.T) {
	l := New(t, DefaultSpec())
	n1 := l.Node("node-1")
	if !n1.BrNetfilter {
		t.Fatal("kernel lacks br_netfilter: nothing to check")
	}
	if _, err := n1.NS.RunInput(serviceRules([]*Pod{l.Pod("pod-b")}), "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	a := l.Pod("pod-a")
	vip := netip.MustParseAddrPort("10.96.0.10:80")
	if r := a.TCP(vip); r.Outcome != OK || r.Pod != "pod-b" {
		t.Fatalf("with br_netfilter: %v", r)
	}
	if err := n1.NS.Sysctl(map[string]string{"net.bridge.bridge-nf-call-iptables": "0"}); err != nil {
		t.Fatal(err)
	}
	if r := a.TCP(vip); r.Outcome == OK {
		t.Fatalf("without br_netfilter, same-bridge service traffic still works: %v", r)
	} else {
		t.Logf("without br_netfilter: %v", r)
	}
}

// TestKpngInNode runs the real kpng binary in a node, fed by the file
// source, with the to-file sink, which needs no dataplane: it runs in the
// node's namespace, follows a State written by the harness, and restarts.
func TestKpngInNode(t *testing.T) {
	l := New(t, DefaultSpec())
	state := NewState(t, l)
	svc := state.AddService("web", TCPPort("http", 80, 8080), UDPPort("dns", 53, 8080))
	state.SetEndpoints(svc, Ready(l.Pod("pod-a"), l.Pod("pod-c"))...)
	state.Write(t)
	p := l.Node("node-1").Start(t, KpngBinary(t), "file", "--input", state.Path, "to-file", "--node-name", "node-1", "--output", "-", "--follow")
	p.WaitOutput(t, "10.244.2.10", 2*time.Minute) // pod-c, a remote endpoint
	// The file is followed: a changed endpoint shows up.
	state.SetEndpoints(svc, Ready(l.Pod("pod-b"))...)
	state.Write(t)
	p.WaitOutput(t, "10.244.1.11", 10*time.Second)
	checkNetns(t, p.Pid(), l.Node("node-1").NS)
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if strings.Count(p.Output(), "=== run") != 3 { // run 1, its exit, run 2
		t.Errorf("output:\n%s", p.Output())
	}
	if p.Err() != nil || !p.Running() {
		t.Errorf("after restart: running %v, err %v", p.Running(), p.Err())
	}
}

// TestProcessSurvivesDo: a process must outlive the OS threads that Netns.Do
// discards. The parent-death signal fires when the forking thread exits, so
// a process forked from a thread later locked and discarded by Do was
// SIGKILLed mid-test (proxies died after their first sync).
func TestProcessSurvivesDo(t *testing.T) {
	l := New(t, DefaultSpec())
	n := l.Node("node-1")
	var procs []*Process
	for range 20 {
		procs = append(procs, n.Start(t, "sleep", "1000"))
		for range 10 {
			if err := n.Do(func() error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 200 {
		if err := n.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a signal is delivered asynchronously
	for i, p := range procs {
		if !p.Running() {
			t.Errorf("process %d died: %v", i, p.Err())
		}
	}
}

// KpngBinaryEnv names the binary to use: an executable file is taken as
// it is, anything else is an error that names the variable.
func TestKpngBinaryEnv(t *testing.T) {
	dir := t.TempDir()
	exe, plain := filepath.Join(dir, "kpng"), filepath.Join(dir, "notes")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(KpngBinaryEnv, exe)
	if got, err := buildKpng(); err != nil || got != exe {
		t.Errorf("an executable: %q, %v; want %q", got, err, exe)
	}
	for _, bad := range []string{plain, dir, filepath.Join(dir, "missing")} {
		t.Setenv(KpngBinaryEnv, bad)
		if _, err := buildKpng(); err == nil || !strings.Contains(err.Error(), KpngBinaryEnv) {
			t.Errorf("%s: got %v, want an error naming %s", bad, err, KpngBinaryEnv)
		}
	}
}
