package netlab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// Prefix starts the name of every network namespace this package creates.
// The sweep of leftovers only ever looks at names with this prefix.
const Prefix = "kpnl-"

// netnsDir is where `ip netns` keeps its bind-mounted namespace handles.
const netnsDir = "/run/netns"

// lockDir holds one lock file per live test process; see runLock.
const lockDir = "/run/kpng-netlab"

// Netns is a named network namespace, as `ip netns` knows it.
type Netns struct {
	// Name is the namespace's name under /run/netns.
	Name string
}

// Path is the namespace's handle, usable with setns(2) and `nsenter --net=`.
func (n *Netns) Path() string { return filepath.Join(netnsDir, n.Name) }

// Do runs fn on an OS thread that has joined the namespace and returns fn's
// error. Sockets created by fn belong to the namespace for their whole life,
// so a listener or connection made inside fn may be used from any goroutine
// afterwards. Goroutines started by fn do NOT run in the namespace.
//
// The thread is never returned to the Go scheduler: it stays locked and the
// runtime discards it when fn returns, so no other goroutine can ever run in
// the wrong namespace.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see the doc comment.
		h, err := netns.GetFromPath(n.Path())
		if err != nil {
			errc <- fmt.Errorf("netns %s: open: %w", n.Name, err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("netns %s: setns: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Command returns an exec.Cmd that runs argv inside the namespace through
// `ip netns exec`, which also mounts the namespace's /sys.
func (n *Netns) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}

// Run runs argv inside the namespace, waits at most 30s, and returns its
// combined output. The error, if any, includes the output.
func (n *Netns) Run(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.Command(ctx, argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("netns %s: %s: %w: %s", n.Name, strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// RunInput is Run with stdin, e.g. `nft -f -` with a ruleset.
func (n *Netns) RunInput(stdin string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := n.Command(ctx, argv...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("netns %s: %s: %w: %s", n.Name, strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// ipBatch runs `ip -n <ns> -batch -` with one ip command per line; it is one
// process for many changes, which keeps building a lab fast.
func (n *Netns) ipBatch(lines []string) error {
	cmd := exec.Command("ip", "-n", n.Name, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns %s: ip -batch: %w: %s", n.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// Sysctl sets net sysctls (keys like "net.ipv4.ip_forward") inside the
// namespace. Net sysctls are per namespace: /proc/sys/net resolves against
// the namespace of the thread that opens it.
func (n *Netns) Sysctl(kv map[string]string) error {
	return n.Do(func() error {
		for k, v := range kv {
			p := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return fmt.Errorf("netns %s: sysctl %s=%s: %w", n.Name, k, v, err)
			}
		}
		return nil
	})
}

// ReadSysctl reads one net sysctl inside the namespace.
func (n *Netns) ReadSysctl(key string) (string, error) {
	var v string
	err := n.Do(func() error {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
		if err != nil {
			return fmt.Errorf("netns %s: read sysctl %s: %w", n.Name, key, err)
		}
		v = strings.TrimSpace(string(b))
		return nil
	})
	return v, err
}

// createNetns creates a named namespace with its loopback up.
func createNetns(name string) (*Netns, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	n := &Netns{Name: name}
	if err := n.ipBatch([]string{"link set lo up"}); err != nil {
		return n, err
	}
	return n, nil
}

// deleteNetns kills every process left in the namespace and deletes it.
// Deleting an already gone namespace is not an error.
func deleteNetns(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// listNetns returns the names of namespaces with our prefix.
func listNetns() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", netnsDir, err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), Prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// The run lock: every test process that builds labs holds an exclusive flock
// on lockDir/<run>.lock for its whole life. The kernel drops the lock when the
// process dies, however it dies, so a namespace whose run's lock can be taken
// belongs to a dead run and may be swept.
var (
	runOnce sync.Once
	runID   string
	runErr  error
	runFile *os.File // kept open (and locked) for the life of the process
)

// currentRun returns this process's run id, taking the run lock on first use.
func currentRun() (string, error) {
	runOnce.Do(func() {
		for range 5 {
			id, f, err := takeRunLock()
			if err != nil {
				runErr = err
				return
			}
			if f != nil {
				runID, runFile = id, f
				return
			}
		}
		runErr = errors.New("run lock: lost the race to sweepers 5 times")
	})
	return runID, runErr
}

// takeRunLock creates and locks a new run's lock file. It returns a nil file
// if a sweeper removed the file between its creation and our flock (the
// sweeper saw it unlocked): the caller then tries again with a new id.
func takeRunLock() (string, *os.File, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("run id: %w", err)
	}
	id := hex.EncodeToString(b)
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("run lock: %w", err)
	}
	path := filepath.Join(lockDir, id+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return "", nil, fmt.Errorf("run lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("run lock %s: %w", path, err)
	}
	// Still the file at path? Then no sweeper can take it from us any more.
	held, err1 := f.Stat()
	named, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(held, named) {
		f.Close()
		return "", nil, nil
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return id, f, nil
}

// runOf extracts the run id from a namespace name "kpnl-<run>-...".
func runOf(name string) string {
	rest := strings.TrimPrefix(name, Prefix)
	run, _, _ := strings.Cut(rest, "-")
	return run
}

// runAlive reports whether the test process that owns run still holds its
// lock. A run with no lock file at all is dead.
func runAlive(run string) bool {
	if run == runID {
		return true
	}
	f, err := os.OpenFile(filepath.Join(lockDir, run+".lock"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true // someone holds it
	}
	// We got it: the owner is dead. Remove its lock file (we still hold the
	// lock, so a concurrent sweeper cannot be confused by a half-removed run).
	os.Remove(f.Name())
	return false
}

// Sweep deletes namespaces left behind by test processes that died without
// cleaning up (killed, crashed, timed out). Namespaces of live runs, including
// this one, are never touched. It returns the names it deleted.
func Sweep() ([]string, error) {
	if _, err := currentRun(); err != nil {
		return nil, err
	}
	names, err := listNetns()
	if err != nil {
		return nil, err
	}
	dead := map[string]bool{}
	var swept []string
	var errs []error
	for _, name := range names {
		run := runOf(name)
		d, seen := dead[run]
		if !seen {
			d = !runAlive(run)
			dead[run] = d
		}
		if !d {
			continue
		}
		if err := deleteNetns(name); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, name)
	}
	// Binaries built by KpngBinary for dead runs.
	if dir, err := binDir(); err == nil {
		bins, _ := filepath.Glob(filepath.Join(dir, kpngBinaryPrefix+"*"))
		for _, b := range bins {
			run := strings.TrimPrefix(filepath.Base(b), kpngBinaryPrefix)
			d, seen := dead[run]
			if !seen {
				d = !runAlive(run)
				dead[run] = d
			}
			if d {
				if err := os.Remove(b); err != nil {
					errs = append(errs, fmt.Errorf("sweep %s: %w", b, err))
				}
			}
		}
	}
	return swept, errors.Join(errs...)
}
