package main

import (
	"github.com/spf13/cobra"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/kubeproxy"
)

// cleanupCommand is `kpng cleanup`: remove what proxies left in the kernel
// and exit, as `kube-proxy --cleanup` does.
func cleanupCommand() *cobra.Command {
	kpng, kubeProxy := true, true
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove kpng's rules (every backend's) and kube-proxy's (every mode's) from this node, then exit",
		Long: `Remove kpng's rules (every backend's) and kube-proxy's (every mode's: its
iptables chains, its kube-proxy nftables tables, IPVS's kube-ipvs0 and
virtual servers) from this node, then exit, as kube-proxy --cleanup does.

To go back from kpng to kube-proxy without a moment with neither set of rules:
stop kpng, start kube-proxy, and once kube-proxy has synced its rules run
kpng cleanup --kube-proxy=false.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var backends []backend.Registration
			if kpng {
				backends = backend.Registered()
			}
			return kubeproxy.CleanupNode(cmd.Context(), backends, kubeProxy)
		},
	}
	cmd.Flags().BoolVar(&kpng, "kpng", kpng, "remove kpng's rules, of every backend")
	cmd.Flags().BoolVar(&kubeProxy, "kube-proxy", kubeProxy, "remove kube-proxy's rules, of every mode")
	return cmd
}
