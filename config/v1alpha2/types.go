// Package v1alpha2 holds the kubeproxy.config.k8s.io/v1alpha2
// KubeProxyConfiguration served by kpng, shaped exactly as KEP-784 describes:
// platform sections (linux, windows), backend-agnostic sync periods at the
// root, detectLocal.clusterCIDRs as a list, and the new fields
// ipvs.masqueradeBit, windows.runAsService, configHardFail, nodeIPOverride and
// ipFamilyPolicy. portRange and bindAddress are gone. kpng adds one section
// of its own, ebpf, the settings of its own mode ebpf (which kube-proxy's
// v1alpha1 cannot hold).
//
// The package holds only the wire types and their defaults; conversion to and
// from kube-proxy's v1alpha1 goes through the hub type in package config.
package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// GroupName is the API group of the kube-proxy component configuration.
const GroupName = "kubeproxy.config.k8s.io"

// Version is this package's API version.
const Version = "v1alpha2"

// APIVersion is the apiVersion value a v1alpha2 document carries.
const APIVersion = GroupName + "/" + Version

// Kind is the kind of the component configuration object.
const Kind = "KubeProxyConfiguration"

// KubeProxyConfiguration contains everything necessary to configure the
// Kubernetes service proxy (v1alpha2, KEP-784).
//
// Fields whose zero value is meaningful and differs from the default are
// pointers, so that "unset" (defaulted) and "explicitly zero" stay distinct
// through a write and a re-read (for example minSyncPeriod: 0s means "sync on
// every change", while an absent minSyncPeriod means 1s).
type KubeProxyConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// linux contains Linux-only settings.
	Linux KubeProxyLinuxConfiguration `json:"linux"`
	// windows contains Windows-only settings.
	Windows KubeProxyWindowsConfiguration `json:"windows"`

	// featureGates is a map of feature names to bools that enable or disable
	// alpha/experimental features.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`

	// clientConnection specifies the kubeconfig file and client connection
	// settings used to talk to the API server.
	ClientConnection componentbaseconfigv1alpha1.ClientConnectionConfiguration `json:"clientConnection"`
	// logging specifies the options of logging.
	Logging logsapi.LoggingConfiguration `json:"logging,omitempty"`

	// hostnameOverride, if non-empty, is used as the name of the Node that the
	// proxy runs on.
	HostnameOverride string `json:"hostnameOverride"`
	// nodeIPOverride is the list of this node's primary IPs (at most one per IP
	// family). Empty means "detect from the Node object". Replaces v1alpha1's
	// bindAddress.
	NodeIPOverride []string `json:"nodeIPOverride"`
	// ipFamilyPolicy controls node IP detection: SingleStack, PreferDualStack or
	// RequireDualStack. Empty keeps the proxy's detection behaviour.
	IPFamilyPolicy IPFamilyPolicy `json:"ipFamilyPolicy"`
	// healthzBindAddress is the IP:port of the health check server.
	HealthzBindAddress string `json:"healthzBindAddress"`
	// metricsBindAddress is the IP:port of the metrics server.
	MetricsBindAddress string `json:"metricsBindAddress"`
	// bindAddressHardFail, if true, makes failure to bind a port fatal.
	// Defaults to true (v1alpha1 defaulted it to false).
	BindAddressHardFail *bool `json:"bindAddressHardFail"`
	// enableProfiling enables /debug/pprof on the metrics server.
	EnableProfiling bool `json:"enableProfiling"`
	// showHiddenMetricsForVersion is the version for which to show hidden metrics.
	ShowHiddenMetricsForVersion string `json:"showHiddenMetricsForVersion"`
	// configHardFail, if true, makes any configuration error fatal; if false,
	// the proxy warns and uses defaults for the bad fields. Defaults to true.
	ConfigHardFail *bool `json:"configHardFail"`

	// mode specifies which proxy mode to use.
	Mode ProxyMode `json:"mode"`
	// iptables contains iptables-specific options.
	IPTables KubeProxyIPTablesConfiguration `json:"iptables"`
	// ipvs contains ipvs-specific options.
	IPVS KubeProxyIPVSConfiguration `json:"ipvs"`
	// nftables contains nftables-specific options.
	NFTables KubeProxyNFTablesConfiguration `json:"nftables"`
	// winkernel contains winkernel-specific options. KEP-784 leaves this
	// section where v1alpha1 had it.
	Winkernel KubeProxyWinkernelConfiguration `json:"winkernel"`
	// ebpf contains the settings of kpng's own mode ebpf (its eBPF
	// backend). kpng's addition: KEP-784 has no such section, and
	// v1alpha1 cannot hold it.
	EBPF KubeProxyEBPFConfiguration `json:"ebpf"`

	// detectLocalMode determines how local (pod) traffic is detected.
	DetectLocalMode LocalMode `json:"detectLocalMode"`
	// detectLocal contains settings for detectLocalMode.
	DetectLocal DetectLocalConfiguration `json:"detectLocal"`

	// nodePortAddresses is a list of CIDRs that contain valid node IPs for
	// NodePort services, or the single string "primary".
	NodePortAddresses []string `json:"nodePortAddresses"`

	// syncPeriod is how often re-synchronizing and cleanup operations run, for
	// every backend. Must be greater than 0.
	SyncPeriod metav1.Duration `json:"syncPeriod"`
	// minSyncPeriod is the minimum period between dataplane resyncs, for every
	// backend. 0 means every change syncs at once. Defaults to 1s when unset.
	MinSyncPeriod *metav1.Duration `json:"minSyncPeriod"`
	// configSyncPeriod is how often configuration from the API server is
	// refreshed. Must be greater than 0.
	ConfigSyncPeriod metav1.Duration `json:"configSyncPeriod"`
}

// KubeProxyLinuxConfiguration contains Linux-only settings.
type KubeProxyLinuxConfiguration struct {
	// conntrack contains conntrack-related options.
	Conntrack KubeProxyConntrackConfiguration `json:"conntrack"`
	// masqueradeAll tells the proxy to SNAT all traffic sent to Service
	// cluster IPs (iptables, ipvs and nftables modes).
	MasqueradeAll bool `json:"masqueradeAll"`
	// oomScoreAdj is the oom-score-adj value for the proxy process, within
	// [-1000, 1000].
	OOMScoreAdj *int32 `json:"oomScoreAdj"`
}

// KubeProxyWindowsConfiguration contains Windows-only settings.
type KubeProxyWindowsConfiguration struct {
	// runAsService, if true, enables Windows service control manager API
	// integration.
	RunAsService bool `json:"runAsService"`
}

// KubeProxyIPTablesConfiguration contains iptables-specific options.
type KubeProxyIPTablesConfiguration struct {
	// masqueradeBit is the bit of the fwmark space used for SNAT in iptables
	// mode, within [0, 31].
	MasqueradeBit *int32 `json:"masqueradeBit"`
	// localhostNodePorts, if true, allows NodePort services to be reached via
	// localhost (iptables mode, IPv4 only). Defaults to false in v1alpha2.
	LocalhostNodePorts *bool `json:"localhostNodePorts"`
}

// KubeProxyIPVSConfiguration contains ipvs-specific options.
type KubeProxyIPVSConfiguration struct {
	// masqueradeBit is the bit of the fwmark space used for SNAT in ipvs mode,
	// within [0, 31]. (v1alpha1's ipvs mode read iptables.masqueradeBit.)
	MasqueradeBit *int32 `json:"masqueradeBit"`
	// scheduler is the IPVS scheduler to use.
	Scheduler string `json:"scheduler"`
	// excludeCIDRs is a list of CIDRs the ipvs proxier does not touch when
	// cleaning up IPVS services.
	ExcludeCIDRs []string `json:"excludeCIDRs"`
	// strictARP configures arp_ignore and arp_announce.
	StrictARP bool `json:"strictARP"`
	// tcpTimeout is the timeout for idle IPVS TCP sessions (0 keeps the system value).
	TCPTimeout metav1.Duration `json:"tcpTimeout"`
	// tcpFinTimeout is the timeout for IPVS TCP sessions after a FIN (0 keeps the system value).
	TCPFinTimeout metav1.Duration `json:"tcpFinTimeout"`
	// udpTimeout is the timeout for IPVS UDP packets (0 keeps the system value).
	UDPTimeout metav1.Duration `json:"udpTimeout"`
}

// KubeProxyNFTablesConfiguration contains nftables-specific options.
type KubeProxyNFTablesConfiguration struct {
	// masqueradeBit is the bit of the fwmark space used for SNAT in nftables
	// mode, within [0, 31].
	MasqueradeBit *int32 `json:"masqueradeBit"`
}

// KubeProxyConntrackConfiguration contains conntrack settings.
type KubeProxyConntrackConfiguration struct {
	// maxPerCore is the maximum number of NAT connections to track per CPU
	// core (0 leaves the limit as-is and ignores min).
	MaxPerCore *int32 `json:"maxPerCore"`
	// min is the minimum number of conntrack records to allocate.
	Min *int32 `json:"min"`
	// tcpEstablishedTimeout is how long an idle TCP connection is kept.
	TCPEstablishedTimeout *metav1.Duration `json:"tcpEstablishedTimeout"`
	// tcpCloseWaitTimeout is how long an idle CLOSE_WAIT entry is kept.
	TCPCloseWaitTimeout *metav1.Duration `json:"tcpCloseWaitTimeout"`
	// tcpBeLiberal, if true, runs conntrack in liberal mode for TCP.
	TCPBeLiberal bool `json:"tcpBeLiberal"`
	// udpTimeout is how long an idle UNREPLIED UDP entry is kept (0 leaves as-is).
	UDPTimeout metav1.Duration `json:"udpTimeout"`
	// udpStreamTimeout is how long an idle ASSURED UDP entry is kept (0 leaves as-is).
	UDPStreamTimeout metav1.Duration `json:"udpStreamTimeout"`
}

// KubeProxyWinkernelConfiguration contains Windows/HNS settings.
type KubeProxyWinkernelConfiguration struct {
	// networkName is the HNS network used for endpoints and policies.
	NetworkName string `json:"networkName"`
	// sourceVip is the IP of the source VIP endpoint used for NAT.
	SourceVip string `json:"sourceVip"`
	// enableDSR creates HNS policies with DSR.
	EnableDSR bool `json:"enableDSR"`
	// rootHnsEndpointName is the hnsendpoint attached to l2bridge for the root namespace.
	RootHnsEndpointName string `json:"rootHnsEndpointName"`
	// forwardHealthCheckVip forwards the service VIP for the health check port.
	ForwardHealthCheckVip bool `json:"forwardHealthCheckVip"`
}

// KubeProxyEBPFConfiguration contains the settings of kpng's eBPF backend
// (mode ebpf), read in that mode only.
type KubeProxyEBPFConfiguration struct {
	// cgroupPath is the cgroup v2 whose sockets (its own and its
	// descendants') are balanced, an absolute path. Empty means the root
	// of the cgroup v2 hierarchy: every process of the node.
	CgroupPath string `json:"cgroupPath"`
	// interfaces are the network interfaces where packets from outside
	// the node reach NodePorts, external and load-balancer IPs: interface
	// names, or exactly [auto] for the interfaces holding the node's
	// addresses when kpng starts. An empty list means none (socket
	// programs only). Defaults to [auto] when unset (null).
	Interfaces []string `json:"interfaces"`
	// pinPath is the folder on a BPF filesystem where the maps and links
	// are pinned, so that a restart resumes from them, an absolute path.
	// Defaults to /sys/fs/bpf/kpng.
	PinPath string `json:"pinPath"`
}

// DetectLocalConfiguration contains settings for detectLocalMode.
type DetectLocalConfiguration struct {
	// bridgeInterface is the bridge whose traffic is local (BridgeInterface mode).
	BridgeInterface string `json:"bridgeInterface"`
	// clusterCIDRs are the pod CIDRs (one per IP family) whose traffic is
	// local (ClusterCIDR mode). Replaces v1alpha1's comma-separated clusterCIDR.
	ClusterCIDRs []string `json:"clusterCIDRs"`
	// interfaceNamePrefix is the prefix of interfaces whose traffic is local
	// (InterfaceNamePrefix mode).
	InterfaceNamePrefix string `json:"interfaceNamePrefix"`
}

// ProxyMode names a proxy backend: iptables, ipvs, nftables (Linux) or
// kernelspace (Windows), or kpng's own ebpf; empty picks the platform's
// default.
type ProxyMode string

// LocalMode names a way to detect local traffic: ClusterCIDR, NodeCIDR,
// BridgeInterface or InterfaceNamePrefix.
type LocalMode string

// IPFamilyPolicy controls node IP detection.
type IPFamilyPolicy string

// The accepted ipFamilyPolicy values.
const (
	IPFamilyPolicySingleStack      IPFamilyPolicy = "SingleStack"
	IPFamilyPolicyPreferDualStack  IPFamilyPolicy = "PreferDualStack"
	IPFamilyPolicyRequireDualStack IPFamilyPolicy = "RequireDualStack"
)
