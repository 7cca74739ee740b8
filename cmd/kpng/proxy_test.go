package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/kubeproxy"
)

// TestBothProxyFormsTakeKubeProxysCommandLine: `kpng proxy` and bare `kpng`
// have every flag of package kubeproxy's command (which
// kubeproxy.TestProxyTakesEveryKubeProxyFlag compares with kube-proxy
// 1.36's), with the same shorthand, deprecation, value when given alone
// and default.
func TestBothProxyFormsTakeKubeProxysCommandLine(t *testing.T) {
	ref := kubeproxy.NewCommand(kpngProxy())
	ref.InitDefaultHelpFlag()
	_ = ref.LocalFlags()
	for _, path := range [][]string{{"proxy"}, {}} {
		cmd, _, err := newRootCommand().Find(path)
		if err != nil {
			t.Fatal(err)
		}
		cmd.InitDefaultHelpFlag()
		_ = cmd.LocalFlags() // merges the persistent and global flags, as parsing does
		name := strings.Join(append([]string{"kpng"}, path...), " ")
		n := 0
		ref.Flags().VisitAll(func(want *pflag.Flag) {
			n++
			got := cmd.Flags().Lookup(want.Name)
			switch {
			case got == nil:
				t.Errorf("%s has no --%s", name, want.Name)
			case got.Shorthand != want.Shorthand || got.Deprecated != want.Deprecated || got.NoOptDefVal != want.NoOptDefVal || got.DefValue != want.DefValue:
				t.Errorf("%s --%s: %+v, the library's: %+v", name, want.Name, got, want)
			}
		})
		if n < 50 {
			t.Errorf("the library's command has %d flags", n)
		}
	}
}

// TestBothProxyFormsResolveTheSameConfiguration: `kpng proxy` and bare
// `kpng` write the configuration that kube-proxy's file and flags resolve
// to (config's golden), "_" spellings included.
func TestBothProxyFormsResolveTheSameConfiguration(t *testing.T) {
	const fixture = "kubeadm-1.36-pod-subnet"
	in := filepath.Join("../../config/testdata/v1alpha1", fixture+".yaml")
	want, err := os.ReadFile(filepath.Join("../../config/testdata/golden", fixture+".v1alpha2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range [][]string{{"proxy"}, nil} {
		out := filepath.Join(t.TempDir(), "out.yaml")
		args := append(slices.Clone(prefix), "--config", in, "--write_config_to", out)
		root := newRootCommand()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("kpng %q: %v", args, err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("kpng %q wrote:\n%s\nwant config/testdata/golden/%s.v1alpha2.yaml", args, got, fixture)
		}
	}
}

// TestKpngRunsEachModeWithItsBackend: kpng's proxy runs each of
// kube-proxy's Linux modes, and its own ebpf, with its backend, all
// compiled in.
func TestKpngRunsEachModeWithItsBackend(t *testing.T) {
	p := kpngProxy()
	for mode, name := range map[config.ProxyMode]string{config.ProxyModeNFTables: "nft", config.ProxyModeIPTables: "iptables",
		config.ProxyModeIPVS: "ipvs", config.ProxyModeEBPF: "ebpf"} {
		if got := p.Backends[mode].Name; got != name {
			t.Errorf("mode %s: backend %q, want %q", mode, got, name)
		}
	}
}

func TestBareKpngPrintsHelp(t *testing.T) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(nil)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Usage:") {
		t.Errorf("bare kpng printed %q, want help", out.String())
	}
}
