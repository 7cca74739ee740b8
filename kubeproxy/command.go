package kubeproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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

// NewCommand returns the command of a program that is p: kube-proxy's
// command line (its flags, --config, klog's -v and --vmodule, --version),
// as kube-proxy's app.NewProxyCommand. Execute runs it.
func NewCommand(p *Proxy) *cobra.Command {
	cmd := &cobra.Command{
		Use:   p.name() + " [--config FILE] [kube-proxy flags]",
		Short: "A kube-proxy: a KubeProxyConfiguration file and kube-proxy's flags",
		Long: `Run as kube-proxy does, driven by a KubeProxyConfiguration file
(kubeproxy.config.k8s.io/v1alpha1, kube-proxy's, or v1alpha2, KEP-784's) and
kube-proxy's flags: the API server is the source, this node's view is computed
in process, and the backend is the one of the configuration's mode.

Flags given on the command line override the file. --write-config-to writes the
resolved configuration as v1alpha2 and exits.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	AddLogFlags(cmd)
	flags := AddFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return p.Run(cmd.Context(), cmd.Flags(), flags)
	}
	CommandLine(cmd)
	return cmd
}

// AddLogFlags adds klog's -v and --vmodule to cmd and every command under
// it, as kube-proxy's command line has them.
func AddLogFlags(cmd *cobra.Command) {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cmd.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	cmd.PersistentFlags().AddGoFlag(klogFlags.Lookup("vmodule"))
}

// Execute runs cmd (a root command: NewCommand's, or one that CommandLine
// prepared) with the process's arguments until it returns or the process
// gets SIGINT or SIGTERM, and returns the exit code, as component-base's
// cli.Run: 0 after --version printed the version, 1 after an error, which
// it prints.
func Execute(cmd *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.ExecuteContext(ctx); err != nil && !errors.Is(err, errVersionPrinted) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name(), err)
		return 1
	}
	return 0
}

// errVersionPrinted ends a command after --version printed the version:
// Execute returns 0.
var errVersionPrinted = errors.New("version printed")

// CommandLine makes root (and every command under it) read a command line
// as kube-proxy's does (component-base's cli.Run): "_" and "-" are the same
// in flag names (--cluster_cidr), and --version prints component-base's
// version.Get() and exits, --version=raw all of it, as kube-proxy's
// --version (component-base's verflag) does. verflag itself is not used: it
// registers its flag in pflag's process-wide set, which cobra adds to every
// root command, and commands built concurrently (tests) would race on that
// one flag. Call it once every command is added.
func CommandLine(root *cobra.Command) {
	v := versionValue(versionFalse)
	root.PersistentFlags().Var(&v, "version", "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version")
	root.PersistentFlags().Lookup("version").NoOptDefVal = string(versionTrue)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		switch v {
		case versionRaw:
			fmt.Fprintf(cmd.OutOrStdout(), "%#v\n", version.Get())
		case versionTrue:
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", root.Name(), version.Get())
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

// name is p's name, or the program's when p has none.
func (p *Proxy) name() string {
	if p.Name != "" {
		return p.Name
	}
	return filepath.Base(os.Args[0])
}
