//go:build e2e

package ebpf

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/internal/netnstest"
)

// The kernel tests name their cgroups and BPF filesystem mounts after the
// test process's run (netnstest.RunID), as netnstest names namespaces, so
// that what a killed run left behind (its cleanups never ran) is found and
// removed by the next run: "kpnl-<run>-ebpf-cg-*" under the cgroup v2 root,
// "kpnl-<run>-ebpf-bpffs-*" (and "-cgroot-*", where the test mounts the
// cgroup v2 hierarchy itself) in the temporary folder.

func leftoverName(t *testing.T, what string) string {
	t.Helper()
	run, err := netnstest.RunID()
	if err != nil {
		t.Fatal(err)
	}
	return netnstest.Prefix + run + "-ebpf-" + what + "-"
}

// sweepLeftovers removes the cgroups and BPF filesystems of dead runs:
// first the pins (which detaches the programs), then the mounts, then the
// cgroups (killing what still runs in them: a dead run's clients).
func sweepLeftovers(t *testing.T, cgroupRoot string) {
	t.Helper()
	dead := func(name string) bool {
		return strings.HasPrefix(name, netnstest.Prefix) && strings.Contains(name, "-ebpf-") && !netnstest.RunAlive(netnstest.RunOf(name))
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && dead(filepath.Base(fields[4])) {
			mounts = append(mounts, fields[4])
		}
	}
	f.Close()
	for _, m := range mounts {
		if strings.Contains(filepath.Base(m), "-ebpf-bpffs-") {
			if err := Remove(filepath.Join(m, "kpng")); err != nil {
				t.Logf("sweeping %s: %v", m, err)
			}
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Logf("sweeping %s: %v", m, err)
			continue
		}
		os.Remove(m)
		t.Logf("removed a dead run's mount %s", m)
	}
	entries, _ := os.ReadDir(cgroupRoot)
	for _, e := range entries {
		if !e.IsDir() || !dead(e.Name()) {
			continue
		}
		dir := filepath.Join(cgroupRoot, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := removeCgroup(dir); err != nil {
			t.Logf("sweeping cgroup %s: %v", dir, err)
			continue
		}
		t.Logf("removed a dead run's cgroup %s", dir)
	}
}
