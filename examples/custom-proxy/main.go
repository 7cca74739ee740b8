// Command custom-proxy is a complete kube-proxy built around a backend:
// kube-proxy's flags and KubeProxyConfiguration file (v1alpha1 or
// v1alpha2), the API server watched with kube-proxy's selectors, kpng's
// brain deciding every Kubernetes service rule for this node, kube-proxy's
// health and metrics servers (/healthz, /livez, /metrics, /configz, /flagz,
// /statusz), its start-up settings, --cleanup, and the removal of
// kube-proxy's own rules once the backend's are in place.
//
// kpng's nftables backend stands in for yours: put your backend.Plugin in
// Backends, for the mode (or modes) its configuration file names.
//
//	custom-proxy --config kube-proxy.yaml   # a file with mode: nftables
//	custom-proxy --proxy-mode nftables --kubeconfig ~/.kube/config --hostname-override node-1
//	custom-proxy --config kube-proxy.yaml --cleanup
package main

import (
	"os"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/backends/nft"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/kubeproxy"
)

// yourBackend is the backend this proxy runs: a backend.Plugin (its flags,
// Open, Cleanup), here kpng's nftables backend.
func yourBackend() backend.Plugin { return &nft.Plugin{} }

func main() {
	proxy := &kubeproxy.Proxy{
		Name: "custom-proxy",
		// The mode a configuration names picks the backend; a mode
		// missing here is refused with a message naming the ones there.
		Backends: map[config.ProxyMode]backend.Registration{
			config.ProxyModeNFTables: {Name: "nft", New: yourBackend},
		},
	}
	// kube-proxy's command line, run until SIGINT or SIGTERM.
	os.Exit(kubeproxy.Execute(kubeproxy.NewCommand(proxy)))
}
