package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/client"
)

// localCommand runs a backend fed by a kpng server's localv1 API: the same
// to-<backend> commands as to-local, with the view computed elsewhere.
func localCommand() *cobra.Command {
	var api apiFlags
	opts := &brain.Options{}
	cmd := &cobra.Command{
		Use:   "local --api ADDRESS to-<backend>",
		Short: "Run a dataplane backend with a node's view received from a kpng server (localv1)",
		Args:  cobra.NoArgs,
	}
	api.bind(cmd.PersistentFlags())
	nodeFlags(cmd.PersistentFlags(), opts)
	cmd.AddCommand(backendCommands(func() string { return opts.NodeName },
		func(ctx context.Context, drive func(context.Context, backend.Feed) error) error {
			copts, err := api.options()
			if err != nil {
				return err
			}
			copts = append(copts, client.WithServiceProxyName(opts.ServiceProxyName), client.WithLogger(slogger(ctx)))
			feed, err := client.NewFeed(api.target, opts.NodeName, copts...)
			if err != nil {
				return err
			}
			defer feed.Close()
			return drive(ctx, feed)
		})...)
	return cmd
}
