package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/pflag"
)

// Plugin is a backend as the command line sees it: flags, then a Backend.
// One Plugin value serves one run of the command.
type Plugin interface {
	// BindFlags adds the backend's flags (those of its to-<name> command).
	BindFlags(fs *pflag.FlagSet)
	// Open checks the flags and prepares the dataplane for env's node, and
	// returns the Backend that Run drives. Long-lived helpers (health
	// servers, say) are stopped when ctx ends.
	Open(ctx context.Context, env Env) (Backend, error)
}

// Env is what a backend learns from the command around it.
type Env struct {
	// NodeName is the node whose view the backend receives.
	NodeName string
}

// Cleaner is implemented by plugins that can remove everything they ever
// put in the kernel: `to-<name> --cleanup` calls Cleanup and exits.
type Cleaner interface {
	Cleanup(ctx context.Context) error
}

// Tuner is implemented by plugins that set how they are driven (sync
// periods); the command calls it after Open.
type Tuner interface {
	RunOptions() Options
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
