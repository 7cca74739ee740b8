// Package config reads, defaults, validates, converts and writes kpng's
// KubeProxyConfiguration: kube-proxy's own kubeproxy.config.k8s.io/v1alpha1
// (the Go types of k8s.io/kube-proxy/config/v1alpha1) and the
// kpng-served kubeproxy.config.k8s.io/v1alpha2 of KEP-784 (package
// config/v1alpha2).
//
// Both versions convert to and from one hub type, KubeProxyConfiguration in
// this package, which is what the daemon uses. The usual flow is:
//
//	loaded, err := config.LoadWith(data, config.LoadOptions{Mode: modeFlag}) // strict decode, default, convert
//	// ... apply command-line flags that were given (flags win over the file)
//	cfg, warnings, err := config.Check(loaded.Config) // validate; honour configHardFail
//	out, err := config.Marshal(cfg)          // --write-config-to: always v1alpha2
//
// The hub's values are always concrete (defaults already applied), so the
// daemon never has to interpret a nil pointer.
package config

import (
	"maps"
	"slices"
	"time"

	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kpng/kpng/config/v1alpha2"
	"github.com/kpng/kpng/proxyutil/sysctl"
)

// KubeProxyConfiguration is the version-independent (hub) configuration of the
// proxy. Its shape follows v1alpha2; every field is concrete.
type KubeProxyConfiguration struct {
	// Linux holds Linux-only settings.
	Linux LinuxConfiguration
	// Windows holds Windows-only settings.
	Windows WindowsConfiguration

	// FeatureGates enables or disables features by name.
	FeatureGates map[string]bool
	// ClientConnection configures the API server client.
	ClientConnection componentbaseconfigv1alpha1.ClientConnectionConfiguration
	// Logging configures logging.
	Logging logsapi.LoggingConfiguration

	// HostnameOverride, if non-empty, names this proxy's Node.
	HostnameOverride string
	// NodeIPOverride lists this node's primary IPs (at most one per family);
	// empty means detect them.
	NodeIPOverride []string
	// IPFamilyPolicy controls node IP detection; empty keeps the default.
	IPFamilyPolicy IPFamilyPolicy
	// HealthzBindAddress is the IP:port of the health check server.
	HealthzBindAddress string
	// MetricsBindAddress is the IP:port of the metrics server.
	MetricsBindAddress string
	// BindAddressHardFail makes failure to bind a port fatal.
	BindAddressHardFail bool
	// EnableProfiling serves /debug/pprof on the metrics server.
	EnableProfiling bool
	// ShowHiddenMetricsForVersion shows metrics hidden since that version.
	ShowHiddenMetricsForVersion string
	// ConfigHardFail makes configuration errors fatal (see Check).
	ConfigHardFail bool

	// Mode selects the proxy backend.
	Mode ProxyMode
	// IPTables holds iptables-specific settings.
	IPTables IPTablesConfiguration
	// IPVS holds ipvs-specific settings.
	IPVS IPVSConfiguration
	// NFTables holds nftables-specific settings.
	NFTables NFTablesConfiguration
	// Winkernel holds Windows HNS settings.
	Winkernel WinkernelConfiguration
	// EBPF holds the settings of kpng's own mode ebpf.
	EBPF EBPFConfiguration

	// DetectLocalMode selects how local traffic is detected.
	DetectLocalMode LocalMode
	// DetectLocal holds the settings DetectLocalMode needs.
	DetectLocal DetectLocalConfiguration

	// NodePortAddresses restricts NodePort listeners to these CIDRs, or to the
	// node's primary IPs when it is exactly ["primary"].
	NodePortAddresses []string

	// SyncPeriod is the full resync interval of every backend.
	SyncPeriod time.Duration
	// MinSyncPeriod is the minimum interval between resyncs (0: sync at once).
	MinSyncPeriod time.Duration
	// ConfigSyncPeriod is the informer resync interval.
	ConfigSyncPeriod time.Duration
}

// LinuxConfiguration holds Linux-only settings.
type LinuxConfiguration struct {
	// Conntrack holds conntrack sysctl settings.
	Conntrack ConntrackConfiguration
	// MasqueradeAll SNATs all traffic sent to Service cluster IPs.
	MasqueradeAll bool
	// OOMScoreAdj is the proxy process's oom_score_adj.
	OOMScoreAdj int32
}

// WindowsConfiguration holds Windows-only settings.
type WindowsConfiguration struct {
	// RunAsService integrates with the Windows service control manager.
	RunAsService bool
}

// ConntrackConfiguration holds conntrack settings: the type that
// proxyutil/sysctl applies, so that the fields and their meaning are
// written once.
type ConntrackConfiguration = sysctl.Conntrack

// IPTablesConfiguration holds iptables-specific settings.
type IPTablesConfiguration struct {
	// MasqueradeBit is the fwmark bit used for SNAT.
	MasqueradeBit int32
	// LocalhostNodePorts lets NodePorts be reached on localhost (IPv4).
	LocalhostNodePorts bool
}

// IPVSConfiguration holds ipvs-specific settings.
type IPVSConfiguration struct {
	// MasqueradeBit is the fwmark bit used for SNAT.
	MasqueradeBit int32
	// Scheduler is the IPVS scheduler.
	Scheduler string
	// ExcludeCIDRs are left alone when cleaning up IPVS services.
	ExcludeCIDRs []string
	// StrictARP sets arp_ignore and arp_announce.
	StrictARP bool
	// TCPTimeout is the idle IPVS TCP session timeout (0: leave as-is).
	TCPTimeout time.Duration
	// TCPFinTimeout is the IPVS TCP timeout after FIN (0: leave as-is).
	TCPFinTimeout time.Duration
	// UDPTimeout is the IPVS UDP timeout (0: leave as-is).
	UDPTimeout time.Duration
}

// NFTablesConfiguration holds nftables-specific settings.
type NFTablesConfiguration struct {
	// MasqueradeBit is the fwmark bit used for SNAT.
	MasqueradeBit int32
}

// WinkernelConfiguration holds Windows HNS settings.
type WinkernelConfiguration struct {
	// NetworkName is the HNS network.
	NetworkName string
	// SourceVip is the source VIP used for NAT.
	SourceVip string
	// EnableDSR creates HNS policies with DSR.
	EnableDSR bool
	// RootHnsEndpointName is the root namespace's hnsendpoint.
	RootHnsEndpointName string
	// ForwardHealthCheckVip forwards the VIP for the health check port.
	ForwardHealthCheckVip bool
}

// EBPFConfiguration holds the settings of kpng's eBPF backend (mode ebpf):
// its flags of the same names (--ebpf-cgroup-path, --ebpf-interfaces,
// --ebpf-pin-path).
type EBPFConfiguration struct {
	// CgroupPath is the cgroup v2 whose sockets are balanced; "" is the
	// root of the cgroup v2 hierarchy (every process of the node).
	CgroupPath string
	// Interfaces are where the north-south programs attach: interface
	// names, or exactly [EBPFInterfacesAuto] for the interfaces holding the
	// node's addresses; empty (or nil) means none.
	Interfaces []string
	// PinPath is a folder on a BPF filesystem for the pinned maps and
	// links.
	PinPath string
}

// DetectLocalConfiguration holds the settings each LocalMode needs.
type DetectLocalConfiguration struct {
	// BridgeInterface is used by LocalModeBridgeInterface.
	BridgeInterface string
	// ClusterCIDRs (one per family) are used by LocalModeClusterCIDR.
	ClusterCIDRs []string
	// InterfaceNamePrefix is used by LocalModeInterfaceNamePrefix.
	InterfaceNamePrefix string
}

// ProxyMode names a proxy backend.
type ProxyMode string

// The proxy modes kube-proxy knows.
const (
	ProxyModeIPTables    ProxyMode = "iptables"
	ProxyModeIPVS        ProxyMode = "ipvs"
	ProxyModeNFTables    ProxyMode = "nftables"
	ProxyModeKernelspace ProxyMode = "kernelspace"

	// ProxyModeEBPF is kpng's own mode, not kube-proxy's: its eBPF
	// backend. It is valid where the program runs it (CheckModes).
	ProxyModeEBPF ProxyMode = "ebpf"
)

// LocalMode names a way to detect local traffic.
type LocalMode string

// The local traffic detection modes.
const (
	LocalModeClusterCIDR         LocalMode = "ClusterCIDR"
	LocalModeNodeCIDR            LocalMode = "NodeCIDR"
	LocalModeBridgeInterface     LocalMode = "BridgeInterface"
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
)

// IPFamilyPolicy controls node IP detection.
type IPFamilyPolicy string

// The accepted IP family policies.
const (
	IPFamilyPolicySingleStack      IPFamilyPolicy = "SingleStack"
	IPFamilyPolicyPreferDualStack  IPFamilyPolicy = "PreferDualStack"
	IPFamilyPolicyRequireDualStack IPFamilyPolicy = "RequireDualStack"
)

// NodePortAddressesPrimary is the nodePortAddresses value that means "the
// node's primary IPs".
const NodePortAddressesPrimary = "primary"

// EBPFInterfacesAuto is the ebpf.interfaces value that means "the
// interfaces holding the node's addresses, when the backend starts".
const EBPFInterfacesAuto = v1alpha2.EBPFInterfacesAuto

// DeepCopy returns a copy of c that shares no memory with it.
func (c *KubeProxyConfiguration) DeepCopy() *KubeProxyConfiguration {
	if c == nil {
		return nil
	}
	out := *c
	out.FeatureGates = maps.Clone(c.FeatureGates)
	out.Logging = *c.Logging.DeepCopy()
	out.NodeIPOverride = slices.Clone(c.NodeIPOverride)
	out.IPVS.ExcludeCIDRs = slices.Clone(c.IPVS.ExcludeCIDRs)
	out.DetectLocal.ClusterCIDRs = slices.Clone(c.DetectLocal.ClusterCIDRs)
	out.NodePortAddresses = slices.Clone(c.NodePortAddresses)
	out.EBPF.Interfaces = slices.Clone(c.EBPF.Interfaces)
	return &out
}
