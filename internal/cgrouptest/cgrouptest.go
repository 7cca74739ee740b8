// Package cgrouptest gives kernel tests cgroups v2 and BPF filesystems of
// their own: the cgroup v2 hierarchy mounted on a private folder, cgroups
// created under its root (and only ever strict descendants of it: a program
// attached to the root would see every process of the machine), and BPF
// filesystem instances for pins, all named after the test process's run
// (internal/netnstest's run id) so that what a killed run left behind is
// found and removed by the next one ([Sweep]).
//
// A cgroup2 mount shows the one v2 hierarchy every process of the machine
// shares, whatever the host mounts (cgroup v1, hybrid or v2): mounting it
// again changes nothing for others, and the cgroups made here are the
// test's because it creates them and moves only its own processes in.
package cgrouptest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/internal/cgroupv2"
	"github.com/kpng/kpng/internal/netnstest"
)

// Name returns a name for something a test makes, after the run:
// "kpnl-<run>-<what>-". [Sweep] removes the ones of dead runs.
func Name(what string) (string, error) {
	run, err := netnstest.RunID()
	if err != nil {
		return "", err
	}
	return netnstest.Prefix + run + "-" + what + "-", nil
}

// MountHierarchy mounts the cgroup v2 hierarchy on a new folder of the
// temporary folder, named after the run and what, and returns the folder:
// the hierarchy's root. Undo it with [Unmount].
func MountHierarchy(what string) (string, error) {
	return mountTemp(what+"-cgroot", "cgroup2", "none")
}

// MountBPFFS mounts a new BPF filesystem instance (pins made there are
// nobody else's) on a new folder of the temporary folder, named after the
// run and what, and returns the folder. Undo it with [Unmount], which also
// deletes the pins.
func MountBPFFS(what string) (string, error) {
	return mountTemp(what+"-bpffs", "bpf", "bpf")
}

func mountTemp(what, fstype, source string) (string, error) {
	prefix, err := Name(what)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := unix.Mount(source, dir, fstype, 0, ""); err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("mounting %s on %s: %w", fstype, dir, err)
	}
	return dir, nil
}

// Unmount deletes what a BPF filesystem holds (pins: the objects go once
// nothing else holds them), unmounts dir (lazily: a process still in it
// does not keep it) and removes the folder. An already removed dir is not
// an error.
func Unmount(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	var errs []error
	if fs.Type == unix.BPF_FS_MAGIC {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name() == "maps.debug" || e.Name() == "progs.debug" {
				continue // the kernel's own iterators (bpf_preload), no pins
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if fs.Type == unix.BPF_FS_MAGIC || fs.Type == unix.CGROUP2_SUPER_MAGIC {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", dir, err))
			return errors.Join(errs...)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Create makes the cgroup parent/name and checks that it is a cgroup v2
// and a strict descendant of root (the hierarchy's root, as mounted by
// MountHierarchy), which parent must be or be under. An empty name makes
// a new one, "<pattern>*" as os.MkdirTemp does, from pattern.
func Create(root, parent, name, pattern string) (string, error) {
	var dir string
	if name != "" {
		dir = filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
	} else {
		var err error
		if dir, err = os.MkdirTemp(parent, pattern); err != nil {
			return "", err
		}
	}
	if err := CheckDescendant(root, dir); err != nil {
		Remove(dir)
		return "", err
	}
	return dir, nil
}

// CheckDescendant fails unless dir is a cgroup v2 strictly under root, the
// hierarchy's root.
func CheckDescendant(root, dir string) error {
	rootID, err := cgroupv2.ID(root)
	if err != nil {
		return err
	}
	id, err := cgroupv2.ID(dir)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(dir))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || id == rootID {
		return fmt.Errorf("cgroup %s (id %d) is not a strict descendant of the root %s (id %d)", dir, id, root, rootID)
	}
	return nil
}

// Remove kills every process of the cgroup dir and of its descendants,
// waits until the kernel reaped them, and removes the cgroups, leaves
// first. An already removed dir is not an error.
func Remove(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			if err := Remove(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			break
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dir, err))
			break
		}
		WaitUnpopulated(dir, time.Until(deadline))
	}
	return errors.Join(errs...)
}

// WaitUnpopulated waits, at most within, for the cgroup's cgroup.events to
// say "populated 0": the kernel updates it (and wakes inotify watchers) as
// the last process of the cgroup and its descendants exits.
func WaitUnpopulated(dir string, within time.Duration) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	events := filepath.Join(dir, "cgroup.events")
	if _, err := unix.InotifyAddWatch(fd, events, unix.IN_MODIFY); err != nil {
		return
	}
	b, err := os.ReadFile(events)
	if err != nil || strings.Contains(string(b), "populated 0") {
		return
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	_, _ = unix.Poll(pfd, int(max(within, time.Millisecond).Milliseconds()))
}

// Sweep removes what dead runs left: the cgroups named after them directly
// under root (a hierarchy's root; their processes are killed), then the
// BPF filesystems and cgroup2 hierarchies they mounted (pins deleted).
// Runs still alive, this one included, are never touched. It returns what
// it removed.
func Sweep(root string) ([]string, error) {
	dead := func(name string) bool {
		return strings.HasPrefix(name, netnstest.Prefix) && !netnstest.RunAlive(netnstest.RunOf(name))
	}
	var swept []string
	var errs []error
	if root != "" {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if !e.IsDir() || !dead(e.Name()) {
				continue
			}
			dir := filepath.Join(root, e.Name())
			if err := Remove(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			swept = append(swept, dir)
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return swept, errors.Join(append(errs, err)...)
	}
	var mounts []string
	sc := bufio.NewScanner(f)
	tmp := filepath.Clean(os.TempDir())
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && filepath.Dir(fields[4]) == tmp && dead(filepath.Base(fields[4])) {
			mounts = append(mounts, fields[4])
		}
	}
	f.Close()
	for _, m := range mounts {
		if err := Unmount(m); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, m)
	}
	return swept, errors.Join(errs...)
}

// Cgroup is a test's own cgroup v2, from [New].
type Cgroup struct {
	// Root is the hierarchy's root, mounted for the test.
	Root string
	// Path is the test's cgroup, a child of Root.
	Path string
}

// New mounts the cgroup v2 hierarchy for the test, sweeps what dead runs
// left in it, and creates a cgroup of the test's, a child of the root
// named after the run and what; all of it is removed (processes killed,
// cgroups removed, the hierarchy unmounted) with t.Cleanup, also on
// failure.
func New(t testing.TB, what string) Cgroup {
	t.Helper()
	root, err := MountHierarchy(what)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Unmount(root); err != nil {
			t.Errorf("cgrouptest: %v", err)
		}
	})
	if swept, err := Sweep(root); err != nil {
		t.Logf("cgrouptest: sweeping dead runs: %v", err)
	} else if len(swept) > 0 {
		t.Logf("cgrouptest: removed what dead runs left: %s", strings.Join(swept, " "))
	}
	pattern, err := Name(what)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := Create(root, root, "", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Remove(dir); err != nil {
			t.Errorf("cgrouptest: %v", err)
		}
	})
	return Cgroup{Root: root, Path: dir}
}

// BPFFS mounts a BPF filesystem instance of the test's (see MountBPFFS)
// and unmounts it, pins deleted, with t.Cleanup, also on failure.
func BPFFS(t testing.TB, what string) string {
	t.Helper()
	dir, err := MountBPFFS(what)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Unmount(dir); err != nil {
			t.Errorf("cgrouptest: %v", err)
		}
	})
	return dir
}
