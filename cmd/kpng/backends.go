package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/kubeproxy"
	"github.com/kpng/kpng/local"
)

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
			return cluster.Run(ctx, src, cluster.StageFunc(func(ctx context.Context, store *cluster.Store) error {
				return drive(ctx, local.NewFeed(store, *opts))
			}))
		})...)
	return cmd
}

// backendCommands returns a to-<name> command for every registered backend,
// fed by runFeed. The same commands serve every feed (in-process or gRPC),
// so a backend cannot tell which one feeds it.
func backendCommands(nodeName func() string, runFeed kubeproxy.FeedRunner) []*cobra.Command {
	var cmds []*cobra.Command
	for _, reg := range backend.Registered() {
		plugin := reg.New()
		var cleanup bool
		removeKubeProxy := true
		waitNode := kubeproxy.DefaultNodeWait
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
					tune = kubeproxy.WithKubeProxyRemoval(ctx, plugin)
				}
				return kubeproxy.RunBackend(ctx, reg.Name, plugin, node, kubeproxy.NodeWait{Timeout: waitNode}, tune, runFeed)
			},
		}
		cmd.Flags().AddGoFlagSet(kubeproxy.PluginFlags(reg.Name, plugin))
		cmd.Flags().BoolVar(&removeKubeProxy, "remove-kube-proxy-rules", removeKubeProxy,
			"once kpng's rules are in place, remove kube-proxy's (every mode's), as kube-proxy does when its mode changes; false when kpng runs beside kube-proxy (--service-proxy-name)")
		cmd.Flags().BoolVar(&cleanup, "cleanup", false, "remove everything this backend created in the kernel, then exit")
		cmd.Flags().DurationVar(&waitNode, "wait-for-node", waitNode,
			"at start-up, how long to wait for this node's Node object (with addresses) before programming without it, as kube-proxy waits (0: do not wait)")
		cmds = append(cmds, cmd)
	}
	return cmds
}

// slogger is the logger of ctx (klog's) as a log/slog logger, for the gRPC
// client, which logs through log/slog so that it depends on the standard
// library only.
func slogger(ctx context.Context) *slog.Logger {
	return slog.New(logr.ToSlogHandler(klog.FromContext(ctx)))
}
