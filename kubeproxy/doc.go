// Package kubeproxy makes any backend a complete kube-proxy drop-in:
// kube-proxy's command line (its flags, and a KubeProxyConfiguration file,
// kubeproxy.config.k8s.io/v1alpha1 or v1alpha2), the API server as the
// source, kpng's brain computing this node's view, kube-proxy's health and
// metrics servers (/healthz, /livez, /metrics, /configz, /flagz, /statusz),
// its start-up host settings (logging, oom_score_adj, conntrack sysctls),
// its wait for the Node object, --cleanup, and the removal of kube-proxy's
// own rules once the backend's first sync is in place.
//
// A program is a Proxy naming the backend of each mode, and two calls
// (see ExampleNewCommand):
//
//	p := &kubeproxy.Proxy{Name: "my-proxy", Backends: map[config.ProxyMode]backend.Registration{
//		config.ProxyModeNFTables: {Name: "mine", New: func() backend.Plugin { return myPlugin{} }},
//	}}
//	os.Exit(kubeproxy.Execute(kubeproxy.NewCommand(p)))
//
// cmd/kpng's `kpng proxy` is this package around kpng's nft and iptables
// backends; examples/custom-proxy is a complete program.
package kubeproxy
