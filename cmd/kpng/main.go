// Command kpng is the kpng service proxy: a source of cluster state, then a
// sink for it, each a sub-command with its own flags:
//
//	kpng file --input cluster.yaml to-file --node-name node-1 --output -
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // rest_client_* and the other client-go metrics, as kube-proxy registers them
	_ "k8s.io/component-base/metrics/prometheus/version"  // kubernetes_build_info, as kube-proxy
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil && !errors.Is(err, errVersionPrinted) {
		fmt.Fprintln(os.Stderr, "kpng:", err)
		os.Exit(1)
	}
}

// errVersionPrinted ends a command after --version printed the version:
// main exits 0.
var errVersionPrinted = errors.New("version printed")

// kubeProxyCommandLine makes root (and every command under it) read a
// command line as kube-proxy's does (component-base's cli.Run): "_" and "-"
// are the same in flag names (--cluster_cidr), and --version prints
// component-base's version.Get() and exits, --version=raw all of it, as
// kube-proxy's --version (component-base's verflag) does. verflag itself is
// not used: it registers its flag in pflag's process-wide set, which cobra
// adds to every root command, and commands built concurrently (tests) would
// race on that one flag. Call it once every command is added.
func kubeProxyCommandLine(root *cobra.Command) {
	v := versionValue(versionFalse)
	root.PersistentFlags().Var(&v, "version", "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version")
	root.PersistentFlags().Lookup("version").NoOptDefVal = string(versionTrue)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		switch v {
		case versionRaw:
			fmt.Fprintf(cmd.OutOrStdout(), "%#v\n", version.Get())
		case versionTrue:
			fmt.Fprintf(cmd.OutOrStdout(), "kpng %s\n", version.Get())
		default: // false, or vX.Y.Z: the version to report, and run
			return nil
		}
		return errVersionPrinted
	}
	root.SetGlobalNormalizationFunc(cliflag.WordSepNormalizeFunc)
}

// versionValue is the value of --version, as verflag's: false, true, raw,
// or a version to report instead of the binary's.
type versionValue string

const (
	versionFalse versionValue = "false"
	versionTrue  versionValue = "true"
	versionRaw   versionValue = "raw"
)

func (v *versionValue) String() string   { return string(*v) }
func (v *versionValue) Type() string     { return "version" }
func (v *versionValue) IsBoolFlag() bool { return true }

func (v *versionValue) Set(s string) error {
	if s == string(versionRaw) {
		*v = versionRaw
		return nil
	}
	if strings.HasPrefix(s, "v") {
		if err := version.SetDynamicVersion(s); err != nil {
			return err
		}
		*v = versionValue(s)
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v = versionFalse
	if b {
		*v = versionTrue
	}
	return nil
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kpng",
		Short: "kpng: the Kubernetes service proxy, re-architected",
		Long: `kpng computes, for each node, what the node's service proxy must do (the
same decisions as kube-proxy) and hands that view to a dataplane backend.

A command line is a source of cluster state followed by a sink:
  kpng file --input cluster.yaml  to-file --node-name node-1 --output -`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("vmodule"))

	addProxyCommands(root, realProxyDeps()) // kpng [proxy] --config FILE: kube-proxy's command line
	root.AddCommand(fileCommand())
	root.AddCommand(kubeCommand())
	root.AddCommand(apiCommand(), localCommand())
	root.AddCommand(cleanupCommand())
	root.AddCommand(certsCommand())
	kubeProxyCommandLine(root)
	return root
}
