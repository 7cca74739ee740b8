package kubeproxy

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kpng/kpng/config"
)

// Flags are kube-proxy's command-line flags, as a Proxy takes them.
// Each flag that maps onto a configuration field is bound to a scratch
// configuration (fromFlags) and remembered with the function that copies its
// value into a loaded configuration, so that only the flags the user gave
// override the file.
type Flags struct {
	configFile    string
	writeConfigTo string
	cleanup       bool
	initOnly      bool
	master        string

	fromFlags *config.KubeProxyConfiguration
	fields    []fieldFlag
	// err is why kube-proxy's defaults could not be made (a bug).
	err error

	// kube-proxy's deprecated port flags (see deprecatedPorts).
	healthzPort, metricsPort int32
	// Flags that kube-proxy's binary takes from cadvisor and ignores.
	bootIDFile, machineIDFile string

	// Flags that need translating to their v1alpha2 place.
	clusterCIDR                               string
	bindAddress                               string
	hostnameOverride                          string
	iptablesSyncPeriod, iptablesMinSyncPeriod time.Duration
	ipvsSyncPeriod, ipvsMinSyncPeriod         time.Duration
}

// fieldFlag is a flag that sets configuration fields.
type fieldFlag struct {
	name string
	// apply copies the flag's value into cfg; it runs only when the flag
	// was given, in the order the flags were registered.
	apply func(cfg *config.KubeProxyConfiguration) error
}

type cfg = config.KubeProxyConfiguration

// bindField binds a flag to the field of the scratch configuration that
// field selects, and records that an explicit value is copied to the same
// field of the loaded configuration.
func bindField[T any](f *Flags, name string, field func(*cfg) *T, define func(p *T)) {
	define(field(f.fromFlags))
	f.fields = append(f.fields, fieldFlag{name: name, apply: func(c *cfg) error {
		*field(c) = *field(f.fromFlags)
		return nil
	}})
}

// AddFlags registers kube-proxy's flags on fs and returns them, for
// Proxy.Run.
func AddFlags(fs *pflag.FlagSet) *Flags {
	// Without --config, kube-proxy runs with v1alpha1's defaults: so do
	// the flags.
	d, err := config.DefaultV1Alpha1()
	if err != nil {
		d = config.Default()
	}
	f := &Flags{fromFlags: d, err: err}

	fs.StringVar(&f.configFile, "config", "", "the KubeProxyConfiguration file to read (kubeproxy.config.k8s.io/v1alpha1 or v1alpha2); flags given explicitly override it")
	fs.StringVar(&f.writeConfigTo, "write-config-to", "", "write the configuration (the file, defaults and flags resolved) to this file as v1alpha2, then exit")
	fs.BoolVar(&f.cleanup, "cleanup", false, "remove this proxy's rules (every backend's) and kube-proxy's (every mode's) from the node, then exit, as kube-proxy --cleanup does")
	fs.BoolVar(&f.initOnly, "init-only", false, "apply the settings that need full root privileges (conntrack sysctls, oom_score_adj), then exit")
	fs.StringVar(&f.master, "master", "", "the address of the Kubernetes API server (overrides any value in kubeconfig)")

	bindField(f, "feature-gates", func(c *cfg) *map[string]bool { return &c.FeatureGates }, func(p *map[string]bool) {
		fs.Var(cliflag.NewMapStringBool(p), "feature-gates", "a set of key=value pairs that enable or disable features (added to the file's featureGates)")
	})
	// Feature gates merge with the file's rather than replacing them.
	f.fields[len(f.fields)-1].apply = func(c *cfg) error {
		if c.FeatureGates == nil {
			c.FeatureGates = map[string]bool{}
		}
		for k, v := range f.fromFlags.FeatureGates {
			c.FeatureGates[k] = v
		}
		return nil
	}

	bindField(f, "kubeconfig", func(c *cfg) *string { return &c.ClientConnection.Kubeconfig }, func(p *string) {
		fs.StringVar(p, "kubeconfig", *p, "path to a kubeconfig file with authorization information (the master location can be overridden by --master)")
	})
	bindField(f, "kube-api-content-type", func(c *cfg) *string { return &c.ClientConnection.ContentType }, func(p *string) {
		fs.StringVar(p, "kube-api-content-type", *p, "content type of requests sent to the API server")
	})
	bindField(f, "kube-api-burst", func(c *cfg) *int32 { return &c.ClientConnection.Burst }, func(p *int32) {
		fs.Int32Var(p, "kube-api-burst", *p, "burst to use while talking with the API server")
	})
	bindField(f, "kube-api-qps", func(c *cfg) *float32 { return &c.ClientConnection.QPS }, func(p *float32) {
		fs.Float32Var(p, "kube-api-qps", *p, "QPS to use while talking with the API server")
	})

	fs.StringVar(&f.hostnameOverride, "hostname-override", "", "if non-empty, the name of the Node this proxy runs on (default: the file's hostnameOverride, else the host name)")
	f.fields = append(f.fields, fieldFlag{name: "hostname-override", apply: func(c *cfg) error {
		// As kube-proxy: an empty value leaves the file's; a blank one is
		// an error; a name is trimmed and lower-cased.
		if f.hostnameOverride == "" {
			return nil
		}
		name := normalizeHostname(f.hostnameOverride)
		if name == "" {
			return fmt.Errorf("--hostname-override: %q: a blank host name is invalid", f.hostnameOverride)
		}
		c.HostnameOverride = name
		return nil
	}})
	fs.StringVar(&f.bindAddress, "bind-address", "0.0.0.0", "this node's primary IP (sets nodeIPOverride; 0.0.0.0 or :: mean detect it)")
	f.fields = append(f.fields, fieldFlag{name: "bind-address", apply: func(c *cfg) error {
		ip, err := netip.ParseAddr(f.bindAddress)
		if err != nil {
			return fmt.Errorf("--bind-address: %w", err)
		}
		c.NodeIPOverride = nil
		if !ip.IsUnspecified() {
			c.NodeIPOverride = []string{ip.String()}
		}
		return nil
	}})
	bindField(f, "healthz-bind-address", func(c *cfg) *string { return &c.HealthzBindAddress }, func(p *string) {
		fs.StringVar(p, "healthz-bind-address", *p, "the IP:port of the health check server")
	})
	bindField(f, "metrics-bind-address", func(c *cfg) *string { return &c.MetricsBindAddress }, func(p *string) {
		fs.StringVar(p, "metrics-bind-address", *p, "the IP:port of the metrics server (also serving /configz)")
	})
	bindField(f, "bind-address-hard-fail", func(c *cfg) *bool { return &c.BindAddressHardFail }, func(p *bool) {
		fs.BoolVar(p, "bind-address-hard-fail", *p, "treat failure to bind a port as fatal")
	})
	bindField(f, "profiling", func(c *cfg) *bool { return &c.EnableProfiling }, func(p *bool) {
		fs.BoolVar(p, "profiling", *p, "serve /debug/pprof on the metrics server")
	})
	bindField(f, "show-hidden-metrics-for-version", func(c *cfg) *string { return &c.ShowHiddenMetricsForVersion }, func(p *string) {
		fs.StringVar(p, "show-hidden-metrics-for-version", *p, "the previous version for which to show hidden metrics (<major>.<minor>)")
	})
	bindField(f, "proxy-mode", func(c *cfg) *config.ProxyMode { return &c.Mode }, func(p *config.ProxyMode) {
		fs.StringVar((*string)(p), "proxy-mode", string(*p), "which proxy mode to use: nftables (the nft backend) or iptables (the default, the iptables backend)")
	})

	bindField(f, "iptables-masquerade-bit", func(c *cfg) *int32 { return &c.IPTables.MasqueradeBit }, func(p *int32) {
		fs.Int32Var(p, "iptables-masquerade-bit", *p, "in iptables mode, the bit of the fwmark space that marks packets to SNAT, in [0, 31]")
	})
	bindField(f, "masquerade-all", func(c *cfg) *bool { return &c.Linux.MasqueradeAll }, func(p *bool) {
		fs.BoolVar(p, "masquerade-all", *p, "SNAT all traffic sent via Service cluster IPs")
	})
	bindField(f, "iptables-localhost-nodeports", func(c *cfg) *bool { return &c.IPTables.LocalhostNodePorts }, func(p *bool) {
		fs.BoolVar(p, "iptables-localhost-nodeports", *p, "in iptables mode, let NodePort services be reached on localhost (IPv4)")
	})

	// The per-mode sync period flags all set v1alpha2's syncPeriod and
	// minSyncPeriod, each only in its own mode (as kube-proxy does); the
	// mode is the resolved one, file and --proxy-mode included.
	fs.DurationVar(&f.iptablesSyncPeriod, "iptables-sync-period", d.SyncPeriod, "the longest time between two full resyncs (iptables and nftables modes); > 0")
	fs.DurationVar(&f.iptablesMinSyncPeriod, "iptables-min-sync-period", d.MinSyncPeriod, "the least time between two syncs (iptables and nftables modes); 0 syncs on every change")
	fs.DurationVar(&f.ipvsSyncPeriod, "ipvs-sync-period", d.SyncPeriod, "the longest time between two full resyncs (ipvs mode)")
	fs.DurationVar(&f.ipvsMinSyncPeriod, "ipvs-min-sync-period", d.MinSyncPeriod, "the least time between two syncs (ipvs mode)")
	perMode := func(name string, ipvs bool, val *time.Duration, field func(*cfg) *time.Duration) {
		f.fields = append(f.fields, fieldFlag{name: name, apply: func(c *cfg) error {
			if (c.Mode == config.ProxyModeIPVS) == ipvs {
				*field(c) = *val
			}
			return nil
		}})
	}
	perMode("iptables-sync-period", false, &f.iptablesSyncPeriod, func(c *cfg) *time.Duration { return &c.SyncPeriod })
	perMode("iptables-min-sync-period", false, &f.iptablesMinSyncPeriod, func(c *cfg) *time.Duration { return &c.MinSyncPeriod })
	perMode("ipvs-sync-period", true, &f.ipvsSyncPeriod, func(c *cfg) *time.Duration { return &c.SyncPeriod })
	perMode("ipvs-min-sync-period", true, &f.ipvsMinSyncPeriod, func(c *cfg) *time.Duration { return &c.MinSyncPeriod })

	bindField(f, "ipvs-scheduler", func(c *cfg) *string { return &c.IPVS.Scheduler }, func(p *string) {
		fs.StringVar(p, "ipvs-scheduler", *p, "the ipvs scheduler (ipvs mode)")
	})
	bindField(f, "ipvs-exclude-cidrs", func(c *cfg) *[]string { return &c.IPVS.ExcludeCIDRs }, func(p *[]string) {
		fs.StringSliceVar(p, "ipvs-exclude-cidrs", *p, "CIDRs the ipvs proxier leaves alone when cleaning up (ipvs mode)")
	})
	bindField(f, "ipvs-strict-arp", func(c *cfg) *bool { return &c.IPVS.StrictARP }, func(p *bool) {
		fs.BoolVar(p, "ipvs-strict-arp", *p, "set arp_ignore to 1 and arp_announce to 2 (ipvs mode)")
	})
	bindField(f, "ipvs-tcp-timeout", func(c *cfg) *time.Duration { return &c.IPVS.TCPTimeout }, func(p *time.Duration) {
		fs.DurationVar(p, "ipvs-tcp-timeout", *p, "idle IPVS TCP session timeout, 0 to leave as is (ipvs mode)")
	})
	bindField(f, "ipvs-tcpfin-timeout", func(c *cfg) *time.Duration { return &c.IPVS.TCPFinTimeout }, func(p *time.Duration) {
		fs.DurationVar(p, "ipvs-tcpfin-timeout", *p, "IPVS TCP timeout after a FIN, 0 to leave as is (ipvs mode)")
	})
	bindField(f, "ipvs-udp-timeout", func(c *cfg) *time.Duration { return &c.IPVS.UDPTimeout }, func(p *time.Duration) {
		fs.DurationVar(p, "ipvs-udp-timeout", *p, "IPVS UDP timeout, 0 to leave as is (ipvs mode)")
	})

	bindField(f, "detect-local-mode", func(c *cfg) *config.LocalMode { return &c.DetectLocalMode }, func(p *config.LocalMode) {
		fs.StringVar((*string)(p), "detect-local-mode", string(*p), "how to detect local traffic: ClusterCIDR (default), NodeCIDR, BridgeInterface or InterfaceNamePrefix")
	})
	bindField(f, "pod-bridge-interface", func(c *cfg) *string { return &c.DetectLocal.BridgeInterface }, func(p *string) {
		fs.StringVar(p, "pod-bridge-interface", *p, "with --detect-local-mode=BridgeInterface, traffic from this bridge is local")
	})
	bindField(f, "pod-interface-name-prefix", func(c *cfg) *string { return &c.DetectLocal.InterfaceNamePrefix }, func(p *string) {
		fs.StringVar(p, "pod-interface-name-prefix", *p, "with --detect-local-mode=InterfaceNamePrefix, traffic from interfaces with this prefix is local")
	})
	fs.StringVar(&f.clusterCIDR, "cluster-cidr", "", "the pods' CIDR (a comma-separated dual-stack pair for dual-stack); with --detect-local-mode=ClusterCIDR, traffic from it is local")
	f.fields = append(f.fields, fieldFlag{name: "cluster-cidr", apply: func(c *cfg) error {
		c.DetectLocal.ClusterCIDRs = nil
		if f.clusterCIDR != "" {
			c.DetectLocal.ClusterCIDRs = strings.Split(f.clusterCIDR, ",") // not trimmed, as kube-proxy
		}
		return nil
	}})
	bindField(f, "nodeport-addresses", func(c *cfg) *[]string { return &c.NodePortAddresses }, func(p *[]string) {
		fs.StringSliceVar(p, "nodeport-addresses", *p, "CIDRs of the node IPs that accept NodePort connections, or 'primary' (default: all local IPs)")
	})

	bindField(f, "oom-score-adj", func(c *cfg) *int32 { return &c.Linux.OOMScoreAdj }, func(p *int32) {
		fs.Int32Var(p, "oom-score-adj", *p, "the oom_score_adj of the proxy process, in [-1000, 1000]")
	})
	bindField(f, "conntrack-max-per-core", func(c *cfg) *int32 { return &c.Linux.Conntrack.MaxPerCore }, func(p *int32) {
		fs.Int32Var(p, "conntrack-max-per-core", *p, "conntrack entries per CPU core (0 leaves the limit as is and ignores --conntrack-min)")
	})
	bindField(f, "conntrack-min", func(c *cfg) *int32 { return &c.Linux.Conntrack.Min }, func(p *int32) {
		fs.Int32Var(p, "conntrack-min", *p, "the least conntrack entries to allocate, whatever --conntrack-max-per-core")
	})
	bindField(f, "conntrack-tcp-timeout-established", func(c *cfg) *time.Duration { return &c.Linux.Conntrack.TCPEstablishedTimeout }, func(p *time.Duration) {
		fs.DurationVar(p, "conntrack-tcp-timeout-established", *p, "idle timeout of established TCP connections (0 to leave as is)")
	})
	bindField(f, "conntrack-tcp-timeout-close-wait", func(c *cfg) *time.Duration { return &c.Linux.Conntrack.TCPCloseWaitTimeout }, func(p *time.Duration) {
		fs.DurationVar(p, "conntrack-tcp-timeout-close-wait", *p, "NAT timeout of TCP connections in CLOSE_WAIT (0 to leave as is)")
	})
	bindField(f, "conntrack-tcp-be-liberal", func(c *cfg) *bool { return &c.Linux.Conntrack.TCPBeLiberal }, func(p *bool) {
		fs.BoolVar(p, "conntrack-tcp-be-liberal", *p, "track TCP liberally (nf_conntrack_tcp_be_liberal=1)")
	})
	bindField(f, "conntrack-udp-timeout", func(c *cfg) *time.Duration { return &c.Linux.Conntrack.UDPTimeout }, func(p *time.Duration) {
		fs.DurationVar(p, "conntrack-udp-timeout", *p, "idle timeout of UNREPLIED UDP connections (0 to leave as is)")
	})
	bindField(f, "conntrack-udp-timeout-stream", func(c *cfg) *time.Duration { return &c.Linux.Conntrack.UDPStreamTimeout }, func(p *time.Duration) {
		fs.DurationVar(p, "conntrack-udp-timeout-stream", *p, "idle timeout of ASSURED UDP connections (0 to leave as is)")
	})
	bindField(f, "config-sync-period", func(c *cfg) *time.Duration { return &c.ConfigSyncPeriod }, func(p *time.Duration) {
		fs.DurationVar(p, "config-sync-period", *p, "how often the informers re-list from the API server; > 0")
	})

	// kube-proxy's deprecated port flags, with its defaults and messages.
	fs.Int32Var(&f.healthzPort, "healthz-port", kubeProxyHealthzPort, "The port to bind the health check server. Use 0 to disable.")
	_ = fs.MarkDeprecated("healthz-port", "This flag is deprecated and will be removed in a future release. Please use --healthz-bind-address instead.")
	fs.Int32Var(&f.metricsPort, "metrics-port", kubeProxyMetricsPort, "The port to bind the metrics server. Use 0 to disable.")
	_ = fs.MarkDeprecated("metrics-port", "This flag is deprecated and will be removed in a future release. Please use --metrics-bind-address instead.")
	// cadvisor registers these in Go's global flag set, which kube-proxy's
	// command takes in; kube-proxy never reads them. Accepted, so that a
	// kube-proxy command line works, and said to do nothing when given.
	fs.StringVar(&f.bootIDFile, "boot-id-file", "/proc/sys/kernel/random/boot_id", "Ignored, as in kube-proxy (whose binary registers it for cadvisor).")
	fs.StringVar(&f.machineIDFile, "machine-id-file", "/etc/machine-id,/var/lib/dbus/machine-id", "Ignored, as in kube-proxy (whose binary registers it for cadvisor).")

	// Logging flags, except -v and --vmodule, which the root command
	// already has (klog's); applyLoggingFlags copies all of them.
	var logFlags pflag.FlagSet
	logsapi.AddFlags(&f.fromFlags.Logging, &logFlags)
	logFlags.VisitAll(func(fl *pflag.Flag) {
		if fs.Lookup(fl.Name) == nil {
			fs.AddFlag(fl)
		}
	})
	return f
}

// apply copies every flag given on the command line (fs) into c, kube-proxy
// style: flags override the file. It returns the names of the flags applied.
func (f *Flags) apply(fs *pflag.FlagSet, c *cfg) ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	var applied []string
	// --proxy-mode first: the per-mode sync period flags depend on it.
	ordered := make([]fieldFlag, 0, len(f.fields))
	for _, ff := range f.fields {
		if ff.name == "proxy-mode" {
			ordered = append([]fieldFlag{ff}, ordered...)
		} else {
			ordered = append(ordered, ff)
		}
	}
	for _, ff := range ordered {
		if !fs.Changed(ff.name) {
			continue
		}
		if err := ff.apply(c); err != nil {
			return nil, err
		}
		applied = append(applied, ff.name)
	}
	if err := applyLoggingFlags(fs, &c.Logging); err != nil {
		return nil, err
	}
	return applied, nil
}

// applyLoggingFlags copies the logging flags that were given into to, as
// kube-proxy does (so --config with -v=5 keeps the 5); --vmodule values are
// added to the file's.
func applyLoggingFlags(from *pflag.FlagSet, to *logsapi.LoggingConfiguration) error {
	var clone pflag.FlagSet
	// Registering a flag writes its default into the field (kube-proxy's
	// copyLogsFromFlags loses options.text.splitStream that way): restore
	// the configuration's values once the flags point at them.
	saved := to.DeepCopy()
	logsapi.AddFlags(to, &clone)
	*to = *saved
	vmodule := to.VModule
	to.VModule = nil
	var err error
	clone.VisitAll(func(fl *pflag.Flag) {
		given := from.Lookup(fl.Name)
		if err != nil || given == nil || !given.Changed {
			return
		}
		if setErr := fl.Value.Set(given.Value.String()); setErr != nil {
			err = fmt.Errorf("--%s: %w", fl.Name, setErr)
		}
	})
	to.VModule = append(to.VModule, vmodule...)
	return err
}

// kube-proxy's default ports (k8s.io/kubernetes/pkg/cluster/ports).
const (
	kubeProxyHealthzPort = 10256
	kubeProxyMetricsPort = 10249
)

// deprecatedPorts applies --healthz-port and --metrics-port as kube-proxy
// does: without --config and --write-config-to, a port of 0 turns its server
// off and another port completes a bind address given as a bare IP; an
// address with a port keeps it. kube-proxy ignores them otherwise, as kpng
// does, but kpng says so, and says when a port changes nothing.
func (f *Flags) deprecatedPorts(fs *pflag.FlagSet, c *cfg) (warnings []string) {
	for _, p := range []struct {
		flag, field string
		port        int32
		addr        *string
	}{
		{"healthz-port", "healthzBindAddress", f.healthzPort, &c.HealthzBindAddress},
		{"metrics-port", "metricsBindAddress", f.metricsPort, &c.MetricsBindAddress},
	} {
		if f.configFile != "" || f.writeConfigTo != "" {
			if fs.Changed(p.flag) {
				warnings = append(warnings, fmt.Sprintf("--%s=%d is ignored with --config or --write-config-to, as kube-proxy ignores it: set %s instead", p.flag, p.port, p.field))
			}
			continue
		}
		before := *p.addr
		*p.addr = addressWithPort(*p.addr, p.port)
		if fs.Changed(p.flag) && before == *p.addr {
			warnings = append(warnings, fmt.Sprintf("--%s=%d changes nothing, as in kube-proxy: %s %q has a port already", p.flag, p.port, p.field, before))
		}
	}
	return warnings
}

// addressWithPort is kube-proxy's addressFromDeprecatedFlags: port 0 means
// no server; a bare IP gets the port; anything else is left for validation.
func addressWithPort(addr string, port int32) string {
	if port == 0 {
		return ""
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// ignoredByKubeProxy lists the flags of applied that kube-proxy ignores
// when --config is given (all but --hostname-override and the logging
// flags, which are not in applied): kpng applies them over the file, and
// says so, so that a command line moved from kube-proxy does not change
// behaviour unnoticed.
func ignoredByKubeProxy(applied []string) []string {
	var out []string
	for _, name := range applied {
		if name != "hostname-override" {
			out = append(out, "--"+name)
		}
	}
	return out
}
