package kubeproxy

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
)

// FeedRunner runs drive with a feed of one node's view, and returns when
// drive returns or the feed's producer fails.
type FeedRunner func(ctx context.Context, drive func(context.Context, backend.Feed) error) error

// RunBackend opens plugin (whose flags are parsed) for node and drives it
// with the feed runFeed gives until ctx ends, after waiting for the node's
// Node object as wait says; tune, if set, adjusts the driver's options
// after the plugin's own (a Proxy sets the sync periods of its
// configuration). A Proxy and kpng's to-<backend> commands share it.
func RunBackend(ctx context.Context, name string, plugin backend.Plugin, node string, wait NodeWait, tune func(*backend.Options), runFeed FeedRunner) error {
	if err := checkNetAdmin(name); err != nil {
		return err
	}
	b, opts, err := plugin.Open(ctx, backend.Env{NodeName: node})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if tune != nil {
		tune(&opts)
	}
	if opts.Logger == nil {
		opts.Logger = slogger(ctx)
	}
	opts.OnSync = alsoOnSync(opts.OnSync, afterFirstSync(func() { steadyGC(ctx, os.LookupEnv, debug.SetGCPercent) }))
	opts.OnSync = alsoOnSync(opts.OnSync, releaseAfterLargeSync(debug.FreeOSMemory))
	klog.FromContext(ctx).Info("Starting backend", "backend", name, "node", node)
	return runFeed(ctx, func(ctx context.Context, feed backend.Feed) error {
		return backend.Run(ctx, waitForNode(feed, node, wait), b, opts)
	})
}

// afterFirstSync returns an OnSync that calls once after the first
// successful sync. The driver calls OnSync from one goroutine.
func afterFirstSync(once func()) func(backend.SyncResult) {
	done := false
	return func(res backend.SyncResult) {
		if !done && res.Err == nil {
			done = true
			once()
		}
	}
}

// alsoOnSync returns an OnSync that calls prev (which may be nil), then
// next.
func alsoOnSync(prev, next func(backend.SyncResult)) func(backend.SyncResult) {
	if prev == nil {
		return next
	}
	return func(res backend.SyncResult) {
		prev(res)
		next(res)
	}
}

// PluginFlags returns the flags plugin binds, in a set of the standard
// library's kind (the contract's), for a command line that accepts them
// GNU-style with the command's other flags (pflag's AddGoFlagSet).
func PluginFlags(name string, plugin backend.Plugin) *flag.FlagSet {
	fs := flag.NewFlagSet("to-"+name, flag.ContinueOnError)
	plugin.BindFlags(fs)
	return fs
}

// slogger is the logger of ctx (klog's) as a log/slog logger, for the
// backend driver, which logs through log/slog so that the contract depends
// on the standard library only.
func slogger(ctx context.Context) *slog.Logger {
	return slog.New(logr.ToSlogHandler(klog.FromContext(ctx)))
}

// WithKubeProxyRemoval returns a driver option that, once the backend's
// first sync succeeded, removes kube-proxy's rules (every mode's), as
// kube-proxy does when its mode changes: from then on a packet meets the
// backend's rules, and before it kube-proxy's, never neither. A failure is
// logged, and tried again after the next successful sync. What plugin's
// dataplane is built from is kept (KeepsKubeProxyObjects).
func WithKubeProxyRemoval(ctx context.Context, plugin backend.Plugin) func(*backend.Options) {
	hook := removeKubeProxyAfterFirstSync(ctx, keepFor(plugin))
	return func(o *backend.Options) { o.OnSync = alsoOnSync(o.OnSync, hook) }
}
