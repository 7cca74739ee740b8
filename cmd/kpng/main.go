// Command kpng is the kpng service proxy: a source of cluster state, then a
// sink for it, each a sub-command with its own flags:
//
//	kpng file --input cluster.yaml to-file --node-name node-1 --output -
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kpng:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kpng",
		Short: "kpng: the Kubernetes service proxy, re-architected",
		Long: `kpng computes, for each node, what the node's service proxy must do (the
same decisions as kube-proxy) and hands that view to a dataplane backend.

A command line is a source of cluster state followed by a sink:
  kpng file --input cluster.yaml  to-file --node-name node-1 --output -`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("vmodule"))

	addProxyCommands(root, realProxyDeps()) // kpng [proxy] --config FILE: kube-proxy's command line
	root.AddCommand(fileCommand())
	root.AddCommand(kubeCommand())
	root.AddCommand(apiCommand(), localCommand())
	return root
}
