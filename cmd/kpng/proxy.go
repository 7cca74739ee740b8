package main

import (
	"github.com/spf13/cobra"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/kubeproxy"
)

// modeBackends names the backend of kpng that runs each of kube-proxy's
// Linux modes.
var modeBackends = map[config.ProxyMode]string{
	config.ProxyModeNFTables: "nft",
	config.ProxyModeIPTables: "iptables",
	config.ProxyModeIPVS:     "ipvs",
	config.ProxyModeEBPF:     "ebpf", // kpng's own mode
}

// kpngProxy is kpng as kube-proxy: each mode run by the backend of
// modeBackends compiled into this binary.
func kpngProxy() *kubeproxy.Proxy {
	p := &kubeproxy.Proxy{Name: "kpng", Backends: map[config.ProxyMode]backend.Registration{}}
	for mode, name := range modeBackends {
		if reg, ok := backend.Lookup(name); ok {
			p.Backends[mode] = reg
		}
	}
	return p
}

const proxyLong = `Run as kube-proxy does, driven by a KubeProxyConfiguration file
(kubeproxy.config.k8s.io/v1alpha1, kube-proxy's, or v1alpha2, KEP-784's) and
kube-proxy's flags: the API server is the source, this node's view is computed
in process, and the backend is the one of the configuration's mode
(nftables: nft, iptables or empty: iptables, ipvs: ipvs, see docs/ipvs.md;
kpng's own mode ebpf: its eBPF backend, see docs/ebpf.md).

Flags given on the command line override the file. --write-config-to writes the
resolved configuration as v1alpha2 and exits, which migrates a v1alpha1 file:
  kpng proxy --config old-v1alpha1.yaml --write-config-to new-v1alpha2.yaml

With configHardFail: true (always, for v1alpha1) any configuration error exits
non-zero; with false, invalid fields are reset to their defaults with a warning.`

// addProxyCommands adds "kpng proxy" to root, and makes root itself take
// the same flags, so that kpng runs as kube-proxy does: kpng --config FILE.
// A bare "kpng" still prints help.
func addProxyCommands(root *cobra.Command, p *kubeproxy.Proxy) {
	cmd := &cobra.Command{
		Use:   "proxy [--config FILE] [kube-proxy flags]",
		Short: "Run as kube-proxy: a KubeProxyConfiguration file and kube-proxy's flags",
		Long:  proxyLong,
		Args:  cobra.NoArgs,
	}
	flags := kubeproxy.AddFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return p.Run(cmd.Context(), cmd.Flags(), flags)
	}
	root.AddCommand(cmd)

	rootFlags := kubeproxy.AddFlags(root.Flags())
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Flags().NFlag() == 0 {
			return cmd.Help()
		}
		return p.Run(cmd.Context(), cmd.Flags(), rootFlags)
	}
}
