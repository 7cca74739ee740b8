package kubeproxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/config"
)

// modes returns the modes of p.Backends, sorted: the configuration's mode
// may name any of them, kube-proxy's or the program's own (kpng's ebpf).
func (p *Proxy) modes() []config.ProxyMode {
	var modes []config.ProxyMode
	for m := range p.Backends {
		modes = append(modes, m)
	}
	slices.Sort(modes)
	return modes
}

// backendFor returns the backend that runs mode. An empty mode is
// kube-proxy's Linux default, iptables.
func (p *Proxy) backendFor(mode config.ProxyMode) (backend.Registration, error) {
	if mode == "" {
		mode = config.ProxyModeIPTables
	}
	if reg, ok := p.Backends[mode]; ok {
		return reg, nil
	}
	var modes []string
	for m := range p.Backends {
		modes = append(modes, string(m))
	}
	slices.Sort(modes)
	runs := strings.Join(modes, ", ")
	switch mode {
	case config.ProxyModeIPVS:
		return backend.Registration{}, fmt.Errorf("mode %q: %s has no ipvs backend; use mode %s", mode, p.name(), runs)
	case config.ProxyModeKernelspace:
		return backend.Registration{}, fmt.Errorf("mode %q is Windows' (HNS); %s has no Windows backend", mode, p.name())
	case config.ProxyModeNFTables, config.ProxyModeIPTables:
		return backend.Registration{}, fmt.Errorf("mode %s: %s has no backend for it (it runs mode %s)", mode, p.name(), runs)
	default:
		return backend.Registration{}, fmt.Errorf("mode %q: unknown proxy mode", mode)
	}
}

// backendSetting is a configuration field passed to a backend as one of its
// flags (kube-proxy's flag names).
type backendSetting struct {
	flag string // the backend's flag
	// aliases are other names the flag may have (kube-proxy's own
	// "iptables-masquerade-bit" for a backend's "masquerade-bit").
	aliases []string
	field   string // the v1alpha2 field it comes from, for messages
	value   string
	// always: set the flag even to an empty value (empty has a meaning).
	// Otherwise an empty value is left to the backend's default, which for
	// these fields means "none" too.
	always bool
	// optional: a backend without the flag loses nothing (the proxy
	// itself does the job, e.g. the runner's sync periods).
	optional bool
}

// backendSettings lists what cfg says to the backend of its mode.
func backendSettings(c *config.KubeProxyConfiguration) []backendSetting {
	detectLocal := c.DetectLocalMode
	if detectLocal == "" {
		detectLocal = config.LocalModeClusterCIDR // kube-proxy's platform default
	}
	s := []backendSetting{
		{flag: "nodeport-addresses", field: "nodePortAddresses", value: strings.Join(c.NodePortAddresses, ",")},
		{flag: "masquerade-all", field: "linux.masqueradeAll", value: strconv.FormatBool(c.Linux.MasqueradeAll)},
		{flag: "detect-local-mode", field: "detectLocalMode", value: string(detectLocal)},
		{flag: "cluster-cidr", field: "detectLocal.clusterCIDRs", value: strings.Join(c.DetectLocal.ClusterCIDRs, ",")},
		{flag: "pod-bridge-interface", field: "detectLocal.bridgeInterface", value: c.DetectLocal.BridgeInterface},
		{flag: "pod-interface-name-prefix", field: "detectLocal.interfaceNamePrefix", value: c.DetectLocal.InterfaceNamePrefix},
		{flag: "sync-period", field: "syncPeriod", value: c.SyncPeriod.String(), optional: true},
		{flag: "min-sync-period", field: "minSyncPeriod", value: c.MinSyncPeriod.String(), optional: true},
		{flag: "healthz-bind-address", field: "healthzBindAddress", value: c.HealthzBindAddress},
		// The Proxy serves the metrics (and /configz) itself: the
		// backend's own metrics server is switched off.
		{flag: "metrics-bind-address", field: "metricsBindAddress", value: "", always: true, optional: true},
	}
	switch c.Mode {
	case config.ProxyModeNFTables:
		s = append(s, backendSetting{flag: "masquerade-bit", aliases: []string{"iptables-masquerade-bit"}, field: "nftables.masqueradeBit", value: strconv.Itoa(int(c.NFTables.MasqueradeBit))})
	case config.ProxyModeIPTables, "":
		s = append(s,
			backendSetting{flag: "masquerade-bit", aliases: []string{"iptables-masquerade-bit"}, field: "iptables.masqueradeBit", value: strconv.Itoa(int(c.IPTables.MasqueradeBit))},
			backendSetting{flag: "localhost-nodeports", aliases: []string{"iptables-localhost-nodeports"}, field: "iptables.localhostNodePorts", value: strconv.FormatBool(c.IPTables.LocalhostNodePorts)})
	case config.ProxyModeIPVS:
		// kube-proxy's ipvs mode: its masquerade bit is iptables' (the
		// conversion put it in ipvs.masqueradeBit); an empty scheduler is
		// the backend's default, rr.
		s = append(s,
			backendSetting{flag: "masquerade-bit", aliases: []string{"iptables-masquerade-bit"}, field: "ipvs.masqueradeBit", value: strconv.Itoa(int(c.IPVS.MasqueradeBit))},
			backendSetting{flag: "ipvs-scheduler", field: "ipvs.scheduler", value: c.IPVS.Scheduler},
			backendSetting{flag: "ipvs-exclude-cidrs", field: "ipvs.excludeCIDRs", value: strings.Join(c.IPVS.ExcludeCIDRs, ",")},
			backendSetting{flag: "ipvs-strict-arp", field: "ipvs.strictARP", value: strconv.FormatBool(c.IPVS.StrictARP)},
			backendSetting{flag: "ipvs-tcp-timeout", field: "ipvs.tcpTimeout", value: c.IPVS.TCPTimeout.String()},
			backendSetting{flag: "ipvs-tcpfin-timeout", field: "ipvs.tcpFinTimeout", value: c.IPVS.TCPFinTimeout.String()},
			backendSetting{flag: "ipvs-udp-timeout", field: "ipvs.udpTimeout", value: c.IPVS.UDPTimeout.String()})
	case config.ProxyModeEBPF:
		// The backend's own settings. An empty cgroupPath is the flag's
		// default (the cgroup v2 root), so it is left unset; an empty
		// interfaces list is the flag's "none", spelled out because the
		// flag's default is "auto".
		interfaces := strings.Join(c.EBPF.Interfaces, ",")
		if interfaces == "" {
			interfaces = "none"
		}
		s = append(s,
			backendSetting{flag: "ebpf-cgroup-path", field: "ebpf.cgroupPath", value: c.EBPF.CgroupPath},
			backendSetting{flag: "ebpf-interfaces", field: "ebpf.interfaces", value: interfaces},
			backendSetting{flag: "ebpf-pin-path", field: "ebpf.pinPath", value: c.EBPF.PinPath})
	}
	return s
}

// configureBackend sets the backend's flags (fs, from the plugin's
// BindFlags) from cfg. A value the backend rejects is an error. A setting
// whose flag the backend lacks is a problem unless it holds the default (so
// nothing is lost) or is optional: problems are returned as an error when
// cfg.ConfigHardFail, as warnings otherwise. It returns the flags it set,
// as --name=value, for the log.
func configureBackend(name string, fs *pflag.FlagSet, c *config.KubeProxyConfiguration) (set, warnings []string, err error) {
	defaults := config.Default()
	defaults.Mode = c.Mode
	def := map[string]string{}
	for _, s := range backendSettings(defaults) {
		def[s.flag] = s.value
	}
	var problems []string
	for _, s := range backendSettings(c) {
		def := def[s.flag]
		for _, alias := range s.aliases {
			if fs.Lookup(s.flag) == nil && fs.Lookup(alias) != nil {
				s.flag = alias
			}
		}
		if fs.Lookup(s.flag) == nil {
			if !s.optional && s.value != def {
				problems = append(problems, fmt.Sprintf("%s=%q cannot be applied: backend %q has no --%s flag", s.field, s.value, name, s.flag))
			}
			continue
		}
		if s.value == "" && !s.always {
			continue
		}
		if err := fs.Set(s.flag, s.value); err != nil {
			return nil, nil, fmt.Errorf("%s=%q: backend %q rejects --%s: %w", s.field, s.value, name, s.flag, err)
		}
		set = append(set, fmt.Sprintf("--%s=%s", s.flag, s.value))
	}
	if len(problems) > 0 && c.ConfigHardFail {
		return nil, nil, fmt.Errorf("configuration not supported by the %q backend (configHardFail is true): %s", name, strings.Join(problems, "; "))
	}
	return set, problems, nil
}
