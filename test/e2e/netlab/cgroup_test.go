//go:build e2e

package netlab

import (
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/internal/cgrouptest"
)

// TestCgroups: a lab with cgroups gives each node a cgroup strictly under
// the hierarchy's root and a BPF filesystem; the clients of each node and
// pod open their sockets in a process of its own cgroup (node-1/pod-a, ...)
// and namespace, and report what they observe as the test process's own
// sockets do (an answer with the client's address, a refusal, a timeout).
// Teardown removes the processes, cgroups and mounts.
func TestCgroups(t *testing.T) {
	var root, labCg string
	var fss []string
	t.Run("lab", func(t *testing.T) {
		spec := DefaultSpec()
		spec.Cgroups = true
		l := New(t, spec)
		root, labCg, fss = l.cg.root, l.cg.lab, l.cg.bpffs
		podA, podC, n1 := l.Pod("pod-a"), l.Pod("pod-c"), l.Node("node-1")
		for _, n := range l.Nodes {
			if err := cgrouptest.CheckDescendant(root, n.Cgroup); err != nil {
				t.Error(err)
			}
			if filepath.Dir(n.Cgroup) != labCg || filepath.Dir(labCg) != root {
				t.Errorf("node %s: cgroup %s, want a child of the lab's %s under the root %s", n.Name, n.Cgroup, labCg, root)
			}
			if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || !strings.Contains(string(b), " "+n.BPFFS+" ") {
				t.Errorf("node %s: %s is not mounted (%v)", n.Name, n.BPFFS, err)
			}
		}
		// pod-a's socket maker is in node-1/pod-a and pod-a's namespace.
		procs, err := os.ReadFile(filepath.Join(n1.Cgroup, "pod-a", "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		pids := strings.Fields(string(procs))
		if len(pids) != 1 {
			t.Fatalf("node-1/pod-a holds processes %v, want its socket maker", pids)
		}
		pid, _ := strconv.Atoi(pids[0])
		mine, err1 := os.Readlink("/proc/" + pids[0] + "/ns/net")
		want, err2 := os.Readlink("/proc/self/ns/net")
		if err1 != nil || err2 != nil || mine == want {
			t.Errorf("socket maker %d: network namespace %s (%v %v), the test process's %s", pid, mine, err1, err2, want)
		}

		for _, fam := range []int{4, 6} {
			dst := netip.AddrPortFrom(podC.Addr(fam), 8080)
			for _, proto := range []Protocol{TCP, UDP} {
				if r := podA.Dial(proto, dst, DefaultTimeout); r.Outcome != OK || r.Pod != "pod-c" || r.Peer.Addr() != podA.Addr(fam) {
					t.Errorf("%s %s from pod-a: %v; want pod-c seeing pod-a's address", proto, dst, r)
				}
				closed := netip.AddrPortFrom(podC.Addr(fam), 8099)
				if r := podA.Dial(proto, closed, DefaultTimeout); r.Outcome != Refused || r.Elapsed > DefaultTimeout/2 {
					t.Errorf("%s %s (closed) from pod-a: %v; want refused at once", proto, closed, r)
				}
			}
			// Nowhere: the lab's gateway does not forward (and has no route
			// back to pods for an ICMPv6 error).
			nowhere := netip.AddrPortFrom(netip.MustParseAddr(map[int]string{4: "10.99.0.1", 6: "fd00:99::1"}[fam]), 80)
			if r := podA.Dial(TCP, nowhere, 300*time.Millisecond); r.Outcome != TimedOut {
				t.Errorf("tcp %s from pod-a: %v; want a timeout", nowhere, r)
			}
			s, r := podA.OpenStream(dst, DefaultTimeout)
			if r.Outcome != OK {
				t.Fatalf("stream to %s: %v", dst, r)
			}
			if r := s.Ping(DefaultTimeout); r.Outcome != OK || r.Pod != "pod-c" {
				t.Errorf("ping on the stream: %v", r)
			}
			s.Close()
			u, err := podA.OpenUDP(dst)
			if err != nil {
				t.Fatal(err)
			}
			if r := u.Exchange(DefaultTimeout); r.Outcome != OK || r.Pod != "pod-c" {
				t.Errorf("udp exchange: %v", r)
			}
			u.Close()
		}
		if err := podC.Serve(9091); err != nil {
			t.Fatal(err)
		}
		if r := n1.HTTPGet("http://"+netip.AddrPortFrom(podC.IPv4, 9091).String()+"/", DefaultTimeout); r.Outcome == TimedOut || r.Outcome == Refused {
			// The echo server answers with its line, not HTTP, and
			// closes: the client says "malformed HTTP response" or,
			// when the close wins, that its read failed; either shows
			// the connection was made. A timeout or a refusal does not.
			t.Errorf("HTTP GET from node-1: %v", r)
		}
	})
	for _, dir := range append([]string{root, labCg}, fss...) {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s after teardown: %v", dir, err)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, fs := range append([]string{root}, fss...) {
			if strings.Contains(string(b), fs) {
				t.Errorf("%s still mounted after teardown", fs)
			}
		}
	}
}
