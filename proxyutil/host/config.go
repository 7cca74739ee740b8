package host

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"time"

	"github.com/kpng/kpng/backend"
)

// Config is the kube-proxy settings that every Linux backend takes, under
// kube-proxy's flag names. A backend embeds it in its own configuration.
type Config struct {
	// NodePortAddresses: CIDRs (the node's addresses within them accept
	// node ports), or ["primary"] (the node's primary IP of each family).
	// A family without any CIDR of its own accepts on all its addresses.
	NodePortAddresses []string
	// MasqueradeAll: SNAT all traffic sent to cluster IPs.
	MasqueradeAll bool
	// MasqueradeBit is the bit of the packet mark that marks packets to
	// masquerade.
	MasqueradeBit int
	// ClusterCIDRs are the cluster's pod CIDRs, at most one per family
	// (for DetectLocalMode ClusterCIDR).
	ClusterCIDRs []string
	// DetectLocalMode tells pod traffic from other traffic: one of the
	// LocalMode constants ("" is ClusterCIDR).
	DetectLocalMode        string
	PodBridgeInterface     string
	PodInterfaceNamePrefix string
	// MinSyncPeriod is the least time between two syncs; SyncPeriod the
	// period of the checking syncs; FullSyncPeriod how often one of those
	// repairs everything (0: every one).
	MinSyncPeriod  time.Duration
	SyncPeriod     time.Duration
	FullSyncPeriod time.Duration
	// HealthzBindAddress and MetricsBindAddress are the addresses of the
	// /healthz and /metrics servers (empty: none).
	HealthzBindAddress string
	MetricsBindAddress string
	// Profiling serves /debug/pprof on the metrics server (kube-proxy's
	// --profiling, enableProfiling).
	Profiling bool
	// DryRun prints what would be written instead of writing it.
	DryRun bool
	// IPFamilies are the families to program: "ipv4", "ipv6".
	IPFamilies []string
}

// Defaults is kube-proxy's defaults (v1alpha1) for these settings, which
// a backend's own defaults start from: the masquerade bit 14, a minimum
// sync period of 1 s and a periodic sync every 30 s (reading everything
// back hourly), /healthz on 0.0.0.0:10256 and /metrics on
// 127.0.0.1:10249, both IP families. NodePortAddresses and DetectLocalMode
// are left empty: kube-proxy's defaults for them depend on the mode.
func Defaults() Config {
	return Config{
		MasqueradeBit:      14,
		MinSyncPeriod:      time.Second,
		SyncPeriod:         30 * time.Second,
		FullSyncPeriod:     time.Hour,
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		IPFamilies:         []string{"ipv4", "ipv6"},
	}
}

// BindFlags adds the flags of c's settings to fs, with c's values as
// defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	backend.StringsVar(fs, &c.NodePortAddresses, "nodeport-addresses", c.NodePortAddresses,
		`addresses that accept NodePort traffic: CIDRs (the node's addresses within them), or "primary" (the node's primary IP of each family); a family without any CIDR accepts on all its local addresses`)
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", c.MasqueradeAll, "SNAT all traffic sent to cluster IPs")
	fs.IntVar(&c.MasqueradeBit, "iptables-masquerade-bit", c.MasqueradeBit, "the bit (0-31) of the packet mark that marks packets to masquerade")
	backend.StringsVar(fs, &c.ClusterCIDRs, "cluster-cidr", c.ClusterCIDRs, "the pod CIDRs of the cluster, one per family (for --detect-local-mode=ClusterCIDR): traffic from elsewhere to a cluster IP is masqueraded")
	fs.StringVar(&c.DetectLocalMode, "detect-local-mode", c.DetectLocalMode, "how to tell pod traffic: ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None")
	fs.StringVar(&c.PodBridgeInterface, "pod-bridge-interface", c.PodBridgeInterface, "the bridge of local pods (--detect-local-mode=BridgeInterface)")
	fs.StringVar(&c.PodInterfaceNamePrefix, "pod-interface-name-prefix", c.PodInterfaceNamePrefix, "the name prefix of local pods' interfaces (--detect-local-mode=InterfaceNamePrefix)")
	fs.DurationVar(&c.MinSyncPeriod, "min-sync-period", c.MinSyncPeriod, "least time between two syncs; changes arriving sooner are batched")
	fs.DurationVar(&c.SyncPeriod, "sync-period", c.SyncPeriod, "how often a periodic sync checks the rules, repairing them when they were changed behind kpng's back")
	fs.DurationVar(&c.FullSyncPeriod, "full-sync-period", c.FullSyncPeriod, "how often a periodic sync reads back or rewrites every rule, repairing any difference (kube-proxy: 1h, fixed); 0: every periodic sync")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "address of the /healthz and /livez server (empty: none)")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "address of the /metrics server (empty: none)")
	fs.BoolVar(&c.Profiling, "profiling", c.Profiling, "serve /debug/pprof on the metrics server")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "print what each sync would write instead of writing it")
	backend.StringsVar(fs, &c.IPFamilies, "ip-families", c.IPFamilies, "the IP families to program (ipv4, ipv6)")
}

// BindSomeFlags is BindFlags for the named flags only: a backend that has
// no use for a setting leaves its flag out, so that a configuration asking
// for it is told the setting cannot be applied (kubeproxy's
// configureBackend) rather than silently ignored.
func (c *Config) BindSomeFlags(fs *flag.FlagSet, names ...string) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	c.BindFlags(all)
	for _, name := range names {
		f := all.Lookup(name)
		if f == nil {
			panic("host.Config has no flag " + name)
		}
		fs.Var(f.Value, f.Name, f.Usage)
	}
}

// Validate checks c as kube-proxy checks the same settings, and returns
// every problem found.
func (c *Config) Validate() error {
	var errs []error
	if err := ValidateNodePortAddresses(c.NodePortAddresses); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateMasqueradeBit(c.MasqueradeBit); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateClusterCIDRs(c.ClusterCIDRs); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateLocalDetection(c.DetectLocalMode, c.PodBridgeInterface, c.PodInterfaceNamePrefix); err != nil {
		errs = append(errs, err)
	}
	if len(c.IPFamilies) == 0 {
		errs = append(errs, errors.New("--ip-families must name at least one family"))
	}
	for _, f := range c.IPFamilies {
		if f != "ipv4" && f != "ipv6" {
			errs = append(errs, fmt.Errorf("--ip-families: %q is not ipv4 or ipv6", f))
		}
	}
	if c.MinSyncPeriod < 0 || c.SyncPeriod <= 0 {
		errs = append(errs, errors.New("--min-sync-period must be >= 0 and --sync-period > 0"))
	}
	if c.FullSyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("--full-sync-period %v: must be >= 0", c.FullSyncPeriod))
	}
	return errors.Join(errs...)
}

// ValidateClusterCIDRs checks --cluster-cidr: CIDRs, at most one per
// family, as kube-proxy's clusterCIDR.
func ValidateClusterCIDRs(cidrs []string) error {
	v4, v6 := 0, 0
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("--cluster-cidr: %w", err)
		}
		if p.Addr().Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		return errors.New("--cluster-cidr: at most one CIDR per family")
	}
	return nil
}
