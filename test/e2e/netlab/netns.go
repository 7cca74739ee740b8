package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpng/kpng/internal/netnstest"
)

// Prefix starts the name of every network namespace this package creates.
// The sweep of leftovers only ever looks at names with this prefix.
const Prefix = netnstest.Prefix

// Netns is a named network namespace, as `ip netns` knows it: the harness's
// namespace (Do, Command, Run, Sysctl, ...), plus Start for processes that
// a lab keeps track of.
type Netns struct {
	netnstest.Netns
}

// createNetns creates a named namespace with its loopback up.
func createNetns(name string) (*Netns, error) {
	n, err := netnstest.Create(name)
	if n == nil {
		return nil, err
	}
	return &Netns{*n}, err
}

// Sweep deletes namespaces left behind by test processes that died without
// cleaning up (killed, crashed, timed out), and the kpng binaries KpngBinary
// built for them. Namespaces of live runs, including this one, are never
// touched. It returns the names of the namespaces it deleted.
func Sweep() ([]string, error) {
	swept, err := netnstest.Sweep()
	if err != nil {
		return swept, err
	}
	dir, err := binDir()
	if err != nil {
		return swept, nil
	}
	var errs []error
	bins, _ := filepath.Glob(filepath.Join(dir, kpngBinaryPrefix+"*"))
	for _, b := range bins {
		if netnstest.RunAlive(strings.TrimPrefix(filepath.Base(b), kpngBinaryPrefix)) {
			continue
		}
		if err := os.Remove(b); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sweep %s: %w", b, err))
		}
	}
	return swept, errors.Join(errs...)
}
