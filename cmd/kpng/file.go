package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/source/file"
)

func fileCommand() *cobra.Command {
	src := &file.Source{Watch: true}
	cmd := &cobra.Command{
		Use:   "file --input FILE <sink>",
		Short: "Read the cluster state from a file of Kubernetes objects, and follow its changes",
		Long: `Read Services, EndpointSlices, Nodes and ServiceCIDRs (and Lists of them) from
a YAML or JSON file, as kubectl get -o yaml prints them. The file is watched:
every change publishes its new content.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVarP(&src.Path, "input", "i", "", "the file to read (required)")
	cmd.AddCommand(sinkCommands(func(sourceOptions) (cluster.Stage, error) {
		if src.Path == "" {
			return nil, errors.New("file: --input is required")
		}
		return src, nil
	})...)
	return cmd
}
