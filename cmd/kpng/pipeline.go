package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/kubeproxy"
	"github.com/kpng/kpng/sink/tofile"
)

// nodeFlags registers the flags that select a node's view.
func nodeFlags(fs *pflag.FlagSet, opts *brain.Options) {
	fs.StringVar(&opts.NodeName, "node-name", kubeproxy.HostName(), "the node whose view to compute (default: this host's name)")
	fs.StringVar(&opts.ServiceProxyName, "service-proxy-name", "",
		"also serve Services labelled service.kubernetes.io/service-proxy-name with this value (unlabelled Services are always served)")
}

// sourceOptions is what a source learns from the sink's flags: which node's
// view the sink computes (the kube source then watches only that Node; an
// empty NodeName means every node), and which proxy name it serves (the
// kube source asks the API server for those Services too).
type sourceOptions struct {
	NodeName         string
	ServiceProxyName string
}

// sourceFactory builds the source once the flags are parsed.
type sourceFactory func(sourceOptions) (cluster.Stage, error)

// gateFlag binds --feature-gates of a sink that computes views in this
// process: kube-proxy 1.36's gates, parsed as kpng proxy parses them.
func gateFlag(fs *pflag.FlagSet, gates *map[string]bool) {
	fs.Var(cliflag.NewMapStringBool(gates), "feature-gates",
		"kube-proxy 1.36 feature gates, key=value pairs; those that change a decision of the brain (AllowServiceExternalIPs) apply")
}

// applyGates sets the brain options gates decide, after checking them as
// kube-proxy does; gates kpng does not act on are logged once.
func applyGates(ctx context.Context, gates map[string]bool, opts *brain.Options) error {
	warning, err := kubeproxy.CheckFeatureGates(gates)
	if err != nil {
		return err
	}
	if warning != "" {
		klog.FromContext(ctx).Info("Configuration warning", "warning", warning)
	}
	return kubeproxy.GateBrainOptions(gates, opts)
}

// sourceOptionsFor returns the source options of a node-local sink.
func sourceOptionsFor(opts brain.Options) sourceOptions {
	return sourceOptions{NodeName: opts.NodeName, ServiceProxyName: opts.ServiceProxyName}
}

// sinkCommands returns the sink sub-commands of a source command.
func sinkCommands(source sourceFactory) []*cobra.Command {
	toFile := &tofile.Sink{}
	var toFileGates map[string]bool
	toFileCmd := &cobra.Command{
		Use:   "to-file",
		Short: "Write a node's view (YAML or JSON) to a file or standard output",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if toFile.Options.NodeName == "" {
				return errors.New("--node-name is required (the host name could not be read)")
			}
			if err := applyGates(cmd.Context(), toFileGates, &toFile.Options); err != nil {
				return err
			}
			src, err := source(sourceOptionsFor(toFile.Options))
			if err != nil {
				return err
			}
			return cluster.Run(cmd.Context(), src, toFile)
		},
	}
	nodeFlags(toFileCmd.Flags(), &toFile.Options)
	gateFlag(toFileCmd.Flags(), &toFileGates)
	toFileCmd.Flags().StringVarP(&toFile.Output, "output", "o", "-", `file to write, "-" for standard output`)
	toFileCmd.Flags().StringVar(&toFile.Format, "format", "yaml", "yaml or json")
	toFileCmd.Flags().BoolVar(&toFile.Follow, "follow", false,
		"keep writing: a document per revision of the view (JSON: one line each)")

	return []*cobra.Command{toFileCmd, toLocalCommand(source), toAPICommand(source)}
}
