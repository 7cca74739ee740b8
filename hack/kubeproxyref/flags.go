package main

import (
	"encoding/json"
	goflag "flag"
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register" // as kube-proxy's main: --log-json-* flags
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

// goFlagsAtInit are the Go flags that packages registered as they were
// initialised (cadvisor's --boot-id-file and --machine-id-file): kube-proxy's
// command adds Go's global flag set to its own. Flags registered later (by
// this command's main, or the test binary's -test.*) are not kube-proxy's.
var goFlagsAtInit = func() *goflag.FlagSet {
	fs := goflag.NewFlagSet("init", goflag.ContinueOnError)
	goflag.CommandLine.VisitAll(func(f *goflag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	return fs
}()

// Flags is kube-proxy's command line, as written to kube-proxy-flags.json.
type Flags struct {
	// Kubernetes is the k8s.io/kubernetes version the flags come from.
	Kubernetes string `json:"kubernetes"`
	// Flags are sorted by name.
	Flags []Flag `json:"flags"`
}

// Flag is one flag of kube-proxy.
type Flag struct {
	Name        string `json:"name"`
	Shorthand   string `json:"shorthand,omitempty"`
	Type        string `json:"type"`
	Default     string `json:"default"`
	NoOptDefVal string `json:"noOptDefVal,omitempty"`
	Deprecated  string `json:"deprecated,omitempty"`
	Hidden      bool   `json:"hidden,omitempty"`
	Usage       string `json:"usage"`
}

// kubeProxyFlags returns kube-proxy's flags as JSON. The command is set up
// as kube-proxy's main does it (component-base/cli.Run): the word-separator
// normalizer (so --cluster_cidr is --cluster-cidr) and the logging flags;
// cobra then merges pflag's global set, which holds verflag's --version.
func kubeProxyFlags() ([]byte, error) {
	saved := goflag.CommandLine
	goflag.CommandLine = goFlagsAtInit
	cmd := app.NewProxyCommand()
	goflag.CommandLine = saved
	cmd.SetGlobalNormalizationFunc(cliflag.WordSepNormalizeFunc)
	logs.AddFlags(cmd.PersistentFlags())
	cmd.InitDefaultHelpFlag()
	_ = cmd.LocalFlags() // merges the persistent and global flags into cmd.Flags()

	out := Flags{Kubernetes: kubernetesVersion()}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		out.Flags = append(out.Flags, Flag{
			Name:        f.Name,
			Shorthand:   f.Shorthand,
			Type:        f.Value.Type(),
			Default:     f.DefValue,
			NoOptDefVal: f.NoOptDefVal,
			Deprecated:  f.Deprecated,
			Hidden:      f.Hidden,
			Usage:       f.Usage,
		})
	})
	slices.SortFunc(out.Flags, func(a, b Flag) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(out.Flags) == 0 {
		return nil, fmt.Errorf("kube-proxy's command has no flags")
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// kubernetesVersion is the version of k8s.io/kubernetes this binary is built
// with.
func kubernetesVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "k8s.io/kubernetes" {
				return m.Version
			}
		}
	}
	return "unknown"
}
