//go:build e2e

package netnstest

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// fakeTB records a test's cleanups, so that a test can run them and watch
// what they do.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// TestNewDoAndCleanup: a namespace of New is a namespace of its own, with
// its loopback up; Do, commands and sysctls act there; and its cleanup
// deletes it with what still runs in it.
func TestNewDoAndCleanup(t *testing.T) {
	RequireRoot(t)
	tb := &fakeTB{TB: t}
	n := New(tb, "harness")
	if !strings.HasPrefix(n.Name, Prefix) {
		t.Errorf("name %q lacks the prefix %q", n.Name, Prefix)
	}
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	err = n.Do(func() error {
		inside, err := netns.Get()
		if err != nil {
			return err
		}
		defer inside.Close()
		if inside.Equal(host) {
			return errors.New("Do ran in the host's namespace")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := n.Run("ip", "-o", "link", "show", "lo"); err != nil || !strings.Contains(out, "UP") {
		t.Errorf("lo in the namespace: %q, %v; want it up", out, err)
	}
	if err := n.Sysctl(map[string]string{"net.ipv4.ip_forward": "1"}); err != nil {
		t.Fatal(err)
	}
	if v, err := n.ReadSysctl("net.ipv4.ip_forward"); err != nil || v != "1" {
		t.Errorf("ip_forward in the namespace = %q, %v; want 1", v, err)
	}
	// A process left running in it is killed by the cleanup.
	cmd := n.Command(t.Context(), "sh", "-c", "echo in; exec sleep 1000")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // it is in the namespace
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	tb.runCleanups()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Error("the process left in the namespace was not killed")
	}
	if _, err := os.Stat(n.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace %s left behind: %v", n.Name, err)
	}
}

// TestSweep: namespaces of dead runs are removed with their processes;
// namespaces of live runs, and namespaces without our prefix, are not.
func TestSweep(t *testing.T) {
	RequireRoot(t)
	if _, err := RunID(); err != nil {
		t.Fatal(err)
	}
	// A dead run: no lock file at all, and a stale lock file nobody holds.
	deadNoLock := Prefix + "dead01-0000-n0"
	deadStale := Prefix + "dead02-0000-n0"
	if err := os.WriteFile(filepath.Join(LockDir, "dead02.lock"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A live run: its lock is held (by another open file description of this
	// process, which flock treats like another process).
	liveNS := Prefix + "live03-0000-n0"
	live, err := os.OpenFile(filepath.Join(LockDir, "live03.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// Not ours at all.
	foreign := "netlab-sweep-test-foreign"
	t.Cleanup(func() {
		for _, n := range []string{deadNoLock, deadStale, liveNS, foreign} {
			_ = Delete(n)
		}
		live.Close()
		os.Remove(live.Name())
	})
	for _, n := range []string{deadNoLock, deadStale, liveNS, foreign} {
		if _, err := Create(n); err != nil {
			t.Fatal(err)
		}
	}
	// A process a crashed run left in its namespace (no pdeathsig here).
	cmd := (&Netns{Name: deadNoLock}).Command(t.Context(), "sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	// What a crashed run leaves is a process inside its namespace. `ip
	// netns exec` enters it some time after Start returns; a sweep before
	// that finds no process there, and the child then enters a namespace
	// already unmounted, where nothing can find it (a failure seen at load
	// 10).
	awaitInNamespace(t, cmd.Process.Pid, deadNoLock, waited)

	swept, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(swept)
	if want := []string{deadNoLock, deadStale}; !slices.Equal(swept, want) {
		t.Errorf("swept %v, want %v", swept, want)
	}
	for _, n := range []string{liveNS, foreign} {
		if _, err := os.Stat(filepath.Join(Dir, n)); err != nil {
			t.Errorf("%s was swept: %v", n, err)
		}
	}
	if _, err := os.Stat(filepath.Join(LockDir, "dead02.lock")); err == nil {
		t.Error("stale lock file dead02.lock not removed")
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Error("the orphan process in the swept namespace was not killed")
	}
}

// awaitInNamespace waits until process pid is in the named namespace, or
// fails the test if it exits first (exited receives its Wait's result).
func awaitInNamespace(t *testing.T, pid int, name string, exited <-chan error) {
	t.Helper()
	want, err := netns.GetFromPath(filepath.Join(Dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got, err := netns.GetFromPid(pid); err == nil {
			in := got.Equal(want)
			got.Close()
			if in {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("the process meant to stay in %s exited: %v", name, err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not enter namespace %s within 30 s", pid, name)
		}
	}
}
