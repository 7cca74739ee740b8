package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netns"
)

// nsPrefix starts the name of every namespace the bench creates:
// kpbench-<pid of the parent bench process>-<role>. A namespace whose pid
// is no longer alive is a leftover of a killed run, and is swept.
const nsPrefix = "kpbench-"

const netnsDir = "/run/netns"

// ipCmd runs `ip args...` and returns its error with its output.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ipBatch runs ip commands (one per line) in namespace ns.
func ipBatch(ns string, lines ...string) error {
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns %s: ip -batch: %w: %s", ns, err, bytes.TrimSpace(out))
	}
	return nil
}

// createNetns creates a named namespace with its loopback up.
func createNetns(name string) error {
	if err := ipCmd("netns", "add", name); err != nil {
		return err
	}
	return ipBatch(name, "link set lo up")
}

// deleteNetns kills what still runs in the namespace and deletes it.
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
	return ipCmd("netns", "del", name)
}

// benchNamespaces lists the namespaces of the run of parent pid (all runs
// when pid is 0).
func benchNamespaces(pid int) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		if pid == 0 || strings.HasPrefix(rest, strconv.Itoa(pid)+"-") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// sweepDeadRuns deletes the namespaces of bench runs whose parent process
// is gone (killed before it could clean up).
func sweepDeadRuns() {
	names, err := benchNamespaces(0)
	if err != nil {
		return
	}
	for _, n := range names {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(n, nsPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // a live run, maybe another user's
		}
		if err := deleteNetns(n); err == nil {
			logf("removed namespace %s of a dead run", n)
		}
	}
}

// inNetns runs fn on an OS thread that has joined namespace name. Sockets
// fn creates stay in that namespace for their life. The thread goes back
// to its namespace afterwards and is then returned to the scheduler: a
// thread must not die, because the processes it forked (etcd and
// kube-apiserver, started with a parent-death signal) would be killed with
// it. Only if it cannot go back is it left locked, and so discarded.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: current: %w", err)
			return
		}
		defer orig.Close()
		h, err := netns.GetFromPath(filepath.Join(netnsDir, name))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: %w", name, err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: setns: %w", name, err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
