package backend

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Plugin is a backend as the command line sees it: flags, then a Backend.
// One Plugin value serves one run of the command. Every method is part of
// the contract; there is no optional interface to discover.
type Plugin interface {
	// BindFlags adds the backend's flags (those of its to-<name> command).
	// The command line accepts them GNU-style (--name=value), as kpng's
	// other flags; StringsVar defines a list flag the way kube-proxy's are.
	BindFlags(fs *flag.FlagSet)
	// Open checks the flags and prepares the dataplane for env's node. It
	// returns the Backend that Run drives and the Options it asks Run for
	// (sync periods, the hooks of its metrics and health servers,
	// ResyncNow, LastSyncFull); the command may override the periods.
	// Long-lived helpers (health servers, say) are stopped when ctx ends.
	Open(ctx context.Context, env Env) (Backend, Options, error)
	// Cleanup removes everything the backend, with the settings of its
	// flags, ever put in the kernel; nothing there is not an error. The
	// command calls it instead of Open for `to-<name> --cleanup` and
	// `kpng cleanup`. A backend that keeps no kernel state returns nil.
	Cleanup(ctx context.Context) error
}

// Env is what a backend learns from the command around it.
type Env struct {
	// NodeName is the node whose view the backend receives.
	NodeName string
}

// Registration makes a backend available as the command to-<Name>.
type Registration struct {
	// Name is the backend's name, e.g. "nft"; its command is to-nft.
	Name string
	// Short is a one-line description for help output.
	Short string
	// New returns a fresh Plugin.
	New func() Plugin
}

var (
	mu       sync.Mutex
	registry = map[string]Registration{}
)

// Register adds a backend. It panics on a duplicate or empty name: that is a
// programming error, found at start.
func Register(r Registration) {
	mu.Lock()
	defer mu.Unlock()
	if r.Name == "" || strings.ContainsAny(r.Name, " /") || r.New == nil {
		panic(fmt.Sprintf("backend.Register: invalid registration %q", r.Name))
	}
	if _, dup := registry[r.Name]; dup {
		panic(fmt.Sprintf("backend.Register: %q registered twice", r.Name))
	}
	registry[r.Name] = r
}

// Registered returns every registered backend, sorted by name.
func Registered() []Registration {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Registration, 0, len(registry))
	for _, r := range registry {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Registration) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Lookup returns the backend registered under name.
func Lookup(name string) (Registration, bool) {
	mu.Lock()
	defer mu.Unlock()
	r, ok := registry[name]
	return r, ok
}
