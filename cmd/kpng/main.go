// Command kpng is the kpng service proxy: a source of cluster state, then a
// sink for it, each a sub-command with its own flags:
//
//	kpng file --input cluster.yaml to-file --node-name node-1 --output -
//
// and, as kube-proxy's drop-in (package kubeproxy around kpng's backends):
//
//	kpng [proxy] --config kube-proxy.yaml
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/kpng/kpng/kubeproxy"
)

func main() {
	os.Exit(kubeproxy.Execute(newRootCommand()))
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
	kubeproxy.AddLogFlags(root)
	addProxyCommands(root, kpngProxy()) // kpng [proxy] --config FILE: kube-proxy's command line
	root.AddCommand(fileCommand())
	root.AddCommand(kubeCommand())
	root.AddCommand(apiCommand(), localCommand())
	root.AddCommand(cleanupCommand())
	root.AddCommand(certsCommand())
	root.AddCommand(ebpfMapsCommand())
	kubeproxy.CommandLine(root)
	return root
}
