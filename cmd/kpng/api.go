package main

import (
	"github.com/spf13/cobra"

	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/source/remote"
)

// apiCommand is the source that reads the cluster state from another kpng
// (globalv1): a node agent of a central brain, or a tier of a fan-out tree.
func apiCommand() *cobra.Command {
	var api apiFlags
	cmd := &cobra.Command{
		Use:   "api --api ADDRESS <sink>",
		Short: "Read the cluster state from a kpng server (globalv1), and follow its changes",
		Long: `Read the cluster state that another kpng serves (kpng ... to-api), as a node
agent: one API-server watch, in the serving kpng, feeds many nodes.

  kpng api --api tcp://brain:12090 --api-tls-cert ... --node-name N to-local to-nft`,
		Args: cobra.NoArgs,
	}
	api.bind(cmd.PersistentFlags())
	cmd.AddCommand(sinkCommands(func(sourceOptions) (cluster.Stage, error) { // the whole cluster comes anyway
		opts, err := api.options()
		if err != nil {
			return nil, err
		}
		return &remote.Source{Target: api.target, Options: opts}, nil
	})...)
	return cmd
}
