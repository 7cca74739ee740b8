package main

import (
	"os"

	"github.com/spf13/cobra"

	// The eBPF backend: kpng ... to-ebpf.
	"github.com/kpng/kpng/backends/ebpf"
)

// ebpfMapsCommand prints the eBPF backend's pinned maps: kpng ebpf-maps.
func ebpfMapsCommand() *cobra.Command {
	pinPath := ebpf.DefaultPinPath
	cmd := &cobra.Command{
		Use:   "ebpf-maps",
		Short: "Print the eBPF backend's pinned maps as a table: each Service frontend and its endpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ebpf.WriteTable(os.Stdout, pinPath)
		},
	}
	cmd.Flags().StringVar(&pinPath, "ebpf-pin-path", pinPath, "the to-ebpf --ebpf-pin-path whose maps to print")
	return cmd
}
