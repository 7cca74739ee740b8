// Package netnstest creates named network namespaces and runs code and
// commands inside them: the one harness behind every kernel test of kpng
// (test/e2e/netlab's labs, the backends' and proxyutil's kernel tests) and
// behind hack/bench.
//
// A test calls [New], which names the namespace after the test process's
// run (see [Prefix]) and deletes it with t.Cleanup, failed or not. A
// namespace left by a process that died before its cleanup ran is removed
// by the next [Sweep] (which New does first). Nothing here touches the root
// namespace's interfaces, routes or firewall.
package netnstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// ErrGoexit is Do's error when its function ended with runtime.Goexit.
var ErrGoexit = errors.New("netnstest: the function run in the namespace called runtime.Goexit (t.FailNow?)")

// Dir is where `ip netns` keeps its bind-mounted namespace handles.
const Dir = "/run/netns"

// Netns is a named network namespace, as `ip netns` knows it.
type Netns struct {
	// Name is the namespace's name under Dir.
	Name string
}

// Path is the namespace's handle, usable with setns(2) and `nsenter --net=`.
func (n *Netns) Path() string { return filepath.Join(Dir, n.Name) }

// Do runs fn on an OS thread that has joined the namespace and returns fn's
// error. Sockets created by fn belong to the namespace for their whole life,
// so a listener or connection made inside fn may be used from any goroutine
// afterwards; processes fn starts are in the namespace too. Goroutines
// started by fn do NOT run in the namespace.
//
// The thread is never returned to the Go scheduler: it stays locked and the
// runtime discards it when fn returns, so no other goroutine can ever run in
// the wrong namespace, and fn may change the thread further (unshare a
// mount namespace, say). A process fn starts with a parent-death signal
// gets it when fn returns.
//
// If fn calls runtime.Goexit, as t.FailNow and t.Fatal do, Do returns
// ErrGoexit: a test may fail inside fn and then stop with Do's error.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		err := ErrGoexit // unless enter returns
		defer func() { errc <- err }()
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see the doc comment.
		err = n.enter(fn)
	}()
	return <-errc
}

// enter joins the namespace on the current (locked) thread and runs fn.
func (n *Netns) enter(fn func() error) error {
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		return fmt.Errorf("netns %s: open: %w", n.Name, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return fmt.Errorf("netns %s: setns: %w", n.Name, err)
	}
	return fn()
}

// Command returns an exec.Cmd that runs argv inside the namespace through
// `ip netns exec`, which also mounts the namespace's /sys. `ip netns exec`
// execs argv in place: the command's pid is argv's.
func (n *Netns) Command(ctx context.Context, argv ...string) *exec.Cmd {
	argv = append(n.ExecPrefix(), argv...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// ExecPrefix is the argv that runs what follows it inside the namespace,
// for code that builds its own commands: `ip netns exec <name>`.
func (n *Netns) ExecPrefix() []string { return []string{"ip", "netns", "exec", n.Name} }

// Run runs argv inside the namespace, waits at most 30s, and returns its
// combined output. The error, if any, includes the output.
func (n *Netns) Run(argv ...string) (string, error) {
	return n.RunInput("", argv...)
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

// IPBatch runs `ip -n <ns> -batch -` with one ip command per line: one
// process for many changes, which keeps building a lab fast.
func (n *Netns) IPBatch(lines ...string) error {
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
			if err := os.WriteFile(procSys(k), []byte(v), 0o644); err != nil {
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
		b, err := os.ReadFile(procSys(key))
		if err != nil {
			return fmt.Errorf("netns %s: read sysctl %s: %w", n.Name, key, err)
		}
		v = strings.TrimSpace(string(b))
		return nil
	})
	return v, err
}

func procSys(key string) string { return "/proc/sys/" + strings.ReplaceAll(key, ".", "/") }

// Create creates a named namespace with its loopback up. On an error after
// the namespace exists, it returns the namespace too, for the caller to
// delete.
//
// It uses `ip netns add`, not netns.NewNamed: on a fresh machine the first
// `ip netns` command makes Dir a shared mount point of its own, and a
// namespace bind-mounted before that (racing with another test package)
// could no longer be removed.
func Create(name string) (*Netns, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	n := &Netns{Name: name}
	return n, n.IPBatch("link set lo up")
}

// Delete kills every process left in the namespace and deletes it.
// Deleting an already gone namespace is not an error.
func Delete(name string) error {
	if _, err := os.Stat(filepath.Join(Dir, name)); errors.Is(err, os.ErrNotExist) {
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
		// Two runs sweeping the same dead run's namespaces race: the
		// other one deleted it first.
		if _, serr := os.Stat(filepath.Join(Dir, name)); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("ip netns del %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// List returns the names of the namespaces whose names start with prefix.
func List(prefix string) ([]string, error) {
	entries, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", Dir, err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
