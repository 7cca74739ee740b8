package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Prefix starts the name of every namespace named after a run:
// "kpnl-<run>-...", where <run> is the id [RunID] gives this process.
// [Sweep] only ever looks at names with this prefix.
const Prefix = "kpnl-"

// LockDir holds one lock file per live process that names namespaces after
// its run; see RunID.
const LockDir = "/run/kpng-netlab"

// The run lock: every process that names namespaces after its run holds an
// exclusive flock on LockDir/<run>.lock for its whole life. The kernel drops
// the lock when the process dies, however it dies, so a namespace whose
// run's lock can be taken belongs to a dead run and may be swept.
var (
	runOnce sync.Once
	runID   string
	runErr  error
	runFile *os.File // kept open (and locked) for the life of the process
)

// RunID returns this process's run id, random and unique among live
// processes, taking the run lock on first use.
func RunID() (string, error) {
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

// randomHex returns n random bytes in hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// takeRunLock creates and locks a new run's lock file. It returns a nil file
// if a sweeper removed the file between its creation and our flock (the
// sweeper saw it unlocked): the caller then tries again with a new id.
func takeRunLock() (string, *os.File, error) {
	id, err := randomHex(3)
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(LockDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("run lock: %w", err)
	}
	path := filepath.Join(LockDir, id+".lock")
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

// RunOf extracts the run id from a namespace name "kpnl-<run>-...".
func RunOf(name string) string {
	rest := strings.TrimPrefix(name, Prefix)
	run, _, _ := strings.Cut(rest, "-")
	return run
}

// RunAlive reports whether the process that owns run still holds its lock.
// A run with no lock file at all is dead; the lock file of a dead run is
// removed.
func RunAlive(run string) bool {
	if run == runID {
		return true
	}
	f, err := os.OpenFile(filepath.Join(LockDir, run+".lock"), os.O_RDWR, 0)
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

// Sweep deletes namespaces left behind by processes that died without
// cleaning up (killed, crashed, timed out). Namespaces of live runs,
// including this one, are never touched. It returns the names it deleted.
func Sweep() ([]string, error) {
	if _, err := RunID(); err != nil {
		return nil, err
	}
	names, err := List(Prefix)
	if err != nil {
		return nil, err
	}
	dead := map[string]bool{}
	var swept []string
	var errs []error
	for _, name := range names {
		run := RunOf(name)
		d, seen := dead[run]
		if !seen {
			d = !RunAlive(run)
			dead[run] = d
		}
		if !d {
			continue
		}
		if err := Delete(name); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, name)
	}
	// Lock files of dead runs that left no namespace: RunAlive removes them.
	locks, _ := filepath.Glob(filepath.Join(LockDir, "*.lock"))
	for _, l := range locks {
		run := strings.TrimSuffix(filepath.Base(l), ".lock")
		if _, seen := dead[run]; !seen {
			RunAlive(run)
		}
	}
	return swept, errors.Join(errs...)
}
