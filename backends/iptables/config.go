package iptables

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/kpng/kpng/backend"
)

// Detect-local modes, as kube-proxy's --detect-local-mode.
const (
	LocalModeClusterCIDR         = "ClusterCIDR"
	LocalModeNodeCIDR            = "NodeCIDR"
	LocalModeBridgeInterface     = "BridgeInterface"
	LocalModeInterfaceNamePrefix = "InterfaceNamePrefix"
	LocalModeNone                = "None"
)

// Config is the backend's configuration: kube-proxy's iptables-mode flags.
type Config struct {
	NodePortAddresses      []string
	MasqueradeAll          bool
	MasqueradeBit          int
	ClusterCIDRs           []string
	DetectLocalMode        string
	PodBridgeInterface     string
	PodInterfaceNamePrefix string
	LocalhostNodePorts     bool
	MinSyncPeriod          time.Duration
	SyncPeriod             time.Duration
	// FullSyncPeriod is how often a periodic sync rewrites every chain
	// (kube-proxy: hourly); the periodic syncs in between only check the
	// canary. Zero: every periodic sync is a full one.
	FullSyncPeriod     time.Duration
	HealthzBindAddress string
	MetricsBindAddress string
	DryRun             bool
	// Mode is the iptables variant: auto, nft or legacy.
	Mode string
	// LockWait bounds the wait for the xtables lock.
	LockWait time.Duration
	// IPFamilies limits the families programmed: "ipv4", "ipv6" (both by
	// default).
	IPFamilies []string
}

// DefaultConfig is kube-proxy's defaults (v1alpha1).
func DefaultConfig() Config {
	return Config{
		MasqueradeBit:      14,
		LocalhostNodePorts: true,
		MinSyncPeriod:      time.Second,
		SyncPeriod:         30 * time.Second,
		FullSyncPeriod:     time.Hour,
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		Mode:               "auto",
		LockWait:           5 * time.Second,
		IPFamilies:         []string{"ipv4", "ipv6"},
	}
}

// BindFlags adds the flags to fs, with c's values as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	backend.StringsVar(fs, &c.NodePortAddresses, "nodeport-addresses", c.NodePortAddresses,
		`CIDRs of the node addresses that accept node ports, or "primary" for the node's primary IPs; empty: all local addresses`)
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", c.MasqueradeAll, "SNAT all traffic sent to cluster IPs")
	fs.IntVar(&c.MasqueradeBit, "masquerade-bit", c.MasqueradeBit, "the fwmark bit (0-31) that marks packets to SNAT")
	fs.IntVar(&c.MasqueradeBit, "iptables-masquerade-bit", c.MasqueradeBit, "kube-proxy's name of --masquerade-bit")
	backend.StringsVar(fs, &c.ClusterCIDRs, "cluster-cidr", c.ClusterCIDRs, "the pod CIDRs of the cluster (one per family), for --detect-local-mode=ClusterCIDR")
	fs.StringVar(&c.DetectLocalMode, "detect-local-mode", c.DetectLocalMode,
		"how to tell pod traffic from other traffic: ClusterCIDR (default), NodeCIDR, BridgeInterface, InterfaceNamePrefix or None")
	fs.StringVar(&c.PodBridgeInterface, "pod-bridge-interface", c.PodBridgeInterface, "the pods' bridge, for --detect-local-mode=BridgeInterface")
	fs.StringVar(&c.PodInterfaceNamePrefix, "pod-interface-name-prefix", c.PodInterfaceNamePrefix, "the prefix of the pods' interfaces, for --detect-local-mode=InterfaceNamePrefix")
	fs.BoolVar(&c.LocalhostNodePorts, "localhost-nodeports", c.LocalhostNodePorts, "accept IPv4 node ports on 127.0.0.0/8 (sets route_localnet=1, with kube-proxy's CVE-2020-8558 protection)")
	fs.BoolVar(&c.LocalhostNodePorts, "iptables-localhost-nodeports", c.LocalhostNodePorts, "kube-proxy's name of --localhost-nodeports")
	fs.DurationVar(&c.MinSyncPeriod, "min-sync-period", c.MinSyncPeriod, "the least time between two syncs")
	fs.DurationVar(&c.SyncPeriod, "sync-period", c.SyncPeriod, "the longest time between two syncs; a periodic sync checks the canary chains (a flushed table is rebuilt at once)")
	fs.DurationVar(&c.FullSyncPeriod, "full-sync-period", c.FullSyncPeriod, "how often a periodic sync rewrites every chain, repairing rules changed behind kpng's back (0: every periodic sync)")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "address of the /healthz and /livez server; empty disables it")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "address of the /metrics server; empty disables it")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "print the iptables-restore input of each sync instead of running it")
	fs.StringVar(&c.Mode, "iptables-mode", c.Mode, "the iptables variant: auto (detect as kube-proxy's image does), nft or legacy")
	fs.DurationVar(&c.LockWait, "iptables-lock-wait", c.LockWait, "how long to wait for the xtables lock")
	backend.StringsVar(fs, &c.IPFamilies, "ip-families", c.IPFamilies, "the IP families to program: ipv4, ipv6")
}

// nodePortSelector is --nodeport-addresses for one family.
type nodePortSelector struct {
	primary  bool
	matchAll bool
	prefixes []netip.Prefix
	// containsLoopback: 127.0.0.0/8 addresses may accept node ports.
	containsLoopback bool
}

// validate checks c and returns, per family, its parsed parts.
func (c *Config) validate() error {
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		return fmt.Errorf("--masquerade-bit %d: must be within 0-31", c.MasqueradeBit)
	}
	if c.MinSyncPeriod < 0 || c.SyncPeriod < 0 || c.FullSyncPeriod < 0 {
		return fmt.Errorf("sync periods must not be negative")
	}
	if c.LockWait < time.Second {
		return fmt.Errorf("--iptables-lock-wait %v: must be at least 1s (iptables waits whole seconds)", c.LockWait)
	}
	switch c.Mode {
	case "auto", "nft", "legacy":
	default:
		return fmt.Errorf("--iptables-mode %q: must be auto, nft or legacy", c.Mode)
	}
	for _, f := range c.IPFamilies {
		if f != "ipv4" && f != "ipv6" {
			return fmt.Errorf("--ip-families: %q is neither ipv4 nor ipv6", f)
		}
	}
	for _, a := range c.NodePortAddresses {
		if a == "primary" {
			if len(c.NodePortAddresses) > 1 {
				return fmt.Errorf(`--nodeport-addresses: "primary" cannot be combined with CIDRs`)
			}
			continue
		}
		if _, err := netip.ParsePrefix(a); err != nil {
			return fmt.Errorf("--nodeport-addresses: %w", err)
		}
	}
	v4, v6 := 0, 0
	for _, cidr := range c.ClusterCIDRs {
		p, err := netip.ParsePrefix(cidr)
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
		return fmt.Errorf("--cluster-cidr: at most one CIDR per family")
	}
	switch c.DetectLocalMode {
	case "", LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeNone:
	case LocalModeBridgeInterface:
		if c.PodBridgeInterface == "" {
			return fmt.Errorf("--detect-local-mode=BridgeInterface needs --pod-bridge-interface")
		}
	case LocalModeInterfaceNamePrefix:
		if c.PodInterfaceNamePrefix == "" {
			return fmt.Errorf("--detect-local-mode=InterfaceNamePrefix needs --pod-interface-name-prefix")
		}
	default:
		return fmt.Errorf("--detect-local-mode %q: unknown mode", c.DetectLocalMode)
	}
	return nil
}

// nodePorts returns the node-port address selection of a family, as
// kube-proxy's NodePortAddresses: CIDRs of the other family are ignored,
// and none left means every local address.
func (c *Config) nodePorts(ipv6 bool) nodePortSelector {
	var s nodePortSelector
	if len(c.NodePortAddresses) == 1 && c.NodePortAddresses[0] == "primary" {
		s.primary = true
		return s
	}
	for _, a := range c.NodePortAddresses {
		p, err := netip.ParsePrefix(a)
		if err != nil || p.Addr().Is6() != ipv6 {
			continue
		}
		p = p.Masked()
		if p.Bits() == 0 {
			return nodePortSelector{matchAll: true, containsLoopback: !ipv6}
		}
		if !ipv6 && (p.Addr().IsLoopback() || p.Contains(netip.MustParseAddr("127.0.0.1"))) {
			s.containsLoopback = true
		}
		s.prefixes = append(s.prefixes, p)
	}
	if len(s.prefixes) == 0 {
		return nodePortSelector{matchAll: true, containsLoopback: !ipv6}
	}
	return s
}

// addresses returns the addresses that accept node ports, for a selector
// that does not match all: the node's primary IP of the family, or the
// local interface addresses inside the CIDRs.
func (s nodePortSelector) addresses(ipv6 bool, primary netip.Addr) ([]netip.Addr, error) {
	if s.primary {
		if primary.IsValid() {
			return []netip.Addr{primary}, nil
		}
		return nil, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is6() != ipv6 || seen[ip] {
			continue
		}
		for _, p := range s.prefixes {
			if p.Contains(ip) {
				seen[ip] = true
				out = append(out, ip)
				break
			}
		}
	}
	return out, nil
}

// localDetector is the match that tells traffic from this node's pods:
// ifLocal and ifNotLocal are iptables match arguments; both empty when the
// mode cannot tell (no CIDR known).
type localDetector struct {
	ifLocal, ifNotLocal []string
}

func (d localDetector) implemented() bool { return len(d.ifLocal) > 0 }

// detector returns the family's local-traffic detector; podCIDRs are the
// node's pod CIDRs (for NodeCIDR mode).
func (c *Config) detector(ipv6 bool, podCIDRs []string) localDetector {
	byCIDR := func(cidrs []string) localDetector {
		for _, s := range cidrs {
			p, err := netip.ParsePrefix(s)
			if err != nil || p.Addr().Is6() != ipv6 {
				continue
			}
			p = p.Masked()
			return localDetector{ifLocal: []string{"-s", p.String()}, ifNotLocal: []string{"!", "-s", p.String()}}
		}
		return localDetector{}
	}
	switch c.DetectLocalMode {
	case LocalModeNone:
		return localDetector{}
	case LocalModeNodeCIDR:
		return byCIDR(podCIDRs)
	case LocalModeBridgeInterface:
		return localDetector{ifLocal: []string{"-i", c.PodBridgeInterface}, ifNotLocal: []string{"!", "-i", c.PodBridgeInterface}}
	case LocalModeInterfaceNamePrefix:
		i := strings.TrimSuffix(c.PodInterfaceNamePrefix, "+") + "+"
		return localDetector{ifLocal: []string{"-i", i}, ifNotLocal: []string{"!", "-i", i}}
	default:
		return byCIDR(c.ClusterCIDRs)
	}
}
