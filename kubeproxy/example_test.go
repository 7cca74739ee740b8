package kubeproxy_test

import (
	"context"
	"flag"
	"os"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/kubeproxy"
)

// myPlugin stands in for your backend: its flags, Open and Cleanup.
type myPlugin struct{}

func (myPlugin) BindFlags(*flag.FlagSet) {}

func (myPlugin) Open(context.Context, backend.Env) (backend.Backend, backend.Options, error) {
	return backend.Func(func(context.Context, *backend.State, backend.Changes) error { return nil }), backend.Options{}, nil
}

func (myPlugin) Cleanup(context.Context) error { return nil }

// A complete kube-proxy whose nftables mode is your backend: the main of a
// program (examples/custom-proxy is one, with kpng's nft backend).
func ExampleNewCommand() {
	p := &kubeproxy.Proxy{Name: "my-proxy", Backends: map[config.ProxyMode]backend.Registration{
		config.ProxyModeNFTables: {Name: "mine", New: func() backend.Plugin { return myPlugin{} }},
	}}
	os.Exit(kubeproxy.Execute(kubeproxy.NewCommand(p)))
}
