package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
)

// feedRunner runs drive with a feed of one node's view, and returns when
// drive returns or the feed's producer fails.
type feedRunner func(ctx context.Context, drive func(context.Context, backend.Feed) error) error

// toLocalCommand is the sink that computes a node's view in this process and
// hands it to a backend: kpng <source> ... to-local --node-name N to-<backend>.
func toLocalCommand(source sourceFactory) *cobra.Command {
	opts := &brain.Options{}
	var gates map[string]bool
	cmd := &cobra.Command{
		Use:   "to-local <backend>",
		Short: "Compute a node's view in this process and run a dataplane backend with it",
		Args:  cobra.NoArgs,
	}
	nodeFlags(cmd.PersistentFlags(), opts)
	gateFlag(cmd.PersistentFlags(), &gates)
	cmd.AddCommand(backendCommands(func() string { return opts.NodeName },
		func(ctx context.Context, drive func(context.Context, backend.Feed) error) error {
			if err := applyGates(ctx, gates, opts); err != nil {
				return err
			}
			src, err := source(sourceOptionsFor(*opts))
			if err != nil {
				return err
			}
			return run(ctx, src, stageFunc(func(ctx context.Context, store *cluster.Store) error {
				return drive(ctx, local.NewFeed(store, *opts))
			}))
		})...)
	return cmd
}

// stageFunc adapts a function to stage.
type stageFunc func(ctx context.Context, store *cluster.Store) error

func (f stageFunc) Run(ctx context.Context, store *cluster.Store) error { return f(ctx, store) }

// backendCommands returns a to-<name> command for every registered backend,
// fed by runFeed. The same commands serve every feed (in-process or gRPC),
// so a backend cannot tell which one feeds it.
func backendCommands(nodeName func() string, runFeed feedRunner) []*cobra.Command {
	var cmds []*cobra.Command
	for _, reg := range backend.Registered() {
		plugin := reg.New()
		var cleanup bool
		removeKubeProxy := true
		waitNode := nodeWaitTimeout
		cmd := &cobra.Command{
			Use:   "to-" + reg.Name,
			Short: reg.Short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx := cmd.Context()
				if cleanup {
					return plugin.Cleanup(ctx)
				}
				node := nodeName()
				if node == "" {
					return errors.New("--node-name is required (the host name could not be read)")
				}
				var tune func(*backend.Options)
				if removeKubeProxy {
					tune = withKubeProxyRemoval(ctx)
				}
				return runBackend(ctx, reg.Name, plugin, node, nodeWait{Timeout: waitNode}, tune, runFeed)
			},
		}
		cmd.Flags().AddGoFlagSet(pluginFlags(reg.Name, plugin))
		cmd.Flags().BoolVar(&removeKubeProxy, "remove-kube-proxy-rules", removeKubeProxy,
			"once kpng's rules are in place, remove kube-proxy's (every mode's), as kube-proxy does when its mode changes; false when kpng runs beside kube-proxy (--service-proxy-name)")
		cmd.Flags().BoolVar(&cleanup, "cleanup", false, "remove everything this backend created in the kernel, then exit")
		cmd.Flags().DurationVar(&waitNode, "wait-for-node", waitNode,
			"at start-up, how long to wait for this node's Node object (with addresses) before programming without it, as kube-proxy waits (0: do not wait)")
		cmds = append(cmds, cmd)
	}
	return cmds
}

// pluginFlags returns the flags plugin binds, in a set of the standard
// library's kind (the contract's), for a command line that accepts them
// GNU-style with kpng's other flags (pflag's AddGoFlagSet).
func pluginFlags(name string, plugin backend.Plugin) *flag.FlagSet {
	fs := flag.NewFlagSet("to-"+name, flag.ContinueOnError)
	plugin.BindFlags(fs)
	return fs
}

// slogger is the logger of ctx (klog's) as a log/slog logger, for the
// backend driver and the gRPC client, which log through log/slog so that
// they depend on the standard library only.
func slogger(ctx context.Context) *slog.Logger {
	return slog.New(logr.ToSlogHandler(klog.FromContext(ctx)))
}

// withKubeProxyRemoval adds removeKubeProxyAfterFirstSync to a driver's
// OnSync hook.
func withKubeProxyRemoval(ctx context.Context) func(*backend.Options) {
	hook := removeKubeProxyAfterFirstSync(ctx)
	return func(o *backend.Options) {
		prev := o.OnSync
		o.OnSync = func(res backend.SyncResult) {
			if prev != nil {
				prev(res)
			}
			hook(res)
		}
	}
}

// runBackend opens plugin (whose flags are parsed) for node and drives it
// with the feed runFeed gives until ctx ends; tune, if set, adjusts the
// driver's options after the plugin's own (kpng proxy sets the sync periods
// of its configuration). The to-<name> commands and kpng proxy share it.
func runBackend(ctx context.Context, name string, plugin backend.Plugin, node string, wait nodeWait, tune func(*backend.Options), runFeed feedRunner) error {
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
	klog.FromContext(ctx).Info("Starting backend", "backend", name, "node", node)
	return runFeed(ctx, func(ctx context.Context, feed backend.Feed) error {
		return backend.Run(ctx, waitForNode(feed, node, wait), b, opts)
	})
}
