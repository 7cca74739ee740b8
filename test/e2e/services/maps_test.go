//go:build e2e

package services

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// repairMaps is TestRepair for to-ebpf, whose dataplane is BPF maps pinned
// in the node's BPF filesystem: with the proxy paused, every frontend of
// the services map is deleted (traffic to the Service is then no longer
// rewritten: it times out), and once resumed, the proxy's periodic sync
// must write them back within within. broken dials a Service of the map
// from a client of the node, to see the damage.
func repairMaps(t *testing.T, n *netlab.Node, proc *netlab.Process, broken func() netlab.Result, answers func(time.Duration), within time.Duration) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(n.PinPath(), "kpng_services"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	keys := func() [][]byte {
		t.Helper()
		var ks [][]byte
		var k, v []byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			ks = append(ks, append([]byte(nil), k...))
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return ks
	}
	before := keys()
	if len(before) == 0 {
		t.Fatal("the services map is empty before the damage")
	}
	if err := syscall.Kill(proc.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(proc.Pid(), syscall.SIGCONT)
		}
	}()
	for _, k := range before {
		if err := m.Delete(k); err != nil {
			t.Fatalf("deleting a frontend: %v", err)
		}
	}
	if left := keys(); len(left) != 0 {
		t.Fatalf("%d frontends left after deleting them all", len(left))
	}
	if r := broken(); r.Outcome != netlab.TimedOut {
		t.Fatalf("with the frontends deleted: %v; want a timeout (the connection not rewritten)", r)
	}
	start := time.Now()
	if err := syscall.Kill(proc.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// Every frontend is back (polling the map: the kernel has no event
	// for it), and traffic flows.
	deadline := time.Now().Add(within)
	for len(keys()) != len(before) {
		if time.Now().After(deadline) {
			t.Fatalf("%d frontends before the damage, %d after the repair", len(before), len(keys()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d frontends repaired within %v", len(before), time.Since(start).Round(time.Millisecond))
	answers(settle)
}
