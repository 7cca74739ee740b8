package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/kpng/kpng/internal/netnstest"
)

// nsPrefix starts the name of every namespace the bench creates:
// kpbench-<pid of the parent bench process>-<role>. A namespace whose pid
// is no longer alive is a leftover of a killed run, and is swept. The
// namespaces themselves are made, entered and deleted with
// internal/netnstest, the harness of kpng's kernel tests.
const nsPrefix = "kpbench-"

// ipCmd runs `ip args...` and returns its error with its output.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// benchNamespaces lists the namespaces of the run of parent pid (all runs
// when pid is 0).
func benchNamespaces(pid int) ([]string, error) {
	prefix := nsPrefix
	if pid != 0 {
		prefix += strconv.Itoa(pid) + "-"
	}
	return netnstest.List(prefix)
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
		if err := netnstest.Delete(n); err == nil {
			logf("removed namespace %s of a dead run", n)
		}
	}
}
