package v1alpha2

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	"github.com/kpng/kpng/config/internal/defaults"
)

// Defaults that KEP-784 changes or adds relative to v1alpha1.
const (
	// DefaultLocalhostNodePorts is false in v1alpha2 (true in v1alpha1).
	DefaultLocalhostNodePorts = false
	// DefaultBindAddressHardFail is true in v1alpha2 (false in v1alpha1).
	DefaultBindAddressHardFail = true
	// DefaultConfigHardFail makes configuration errors fatal unless asked otherwise.
	DefaultConfigHardFail = true

	// DefaultEBPFPinPath is ebpf.pinPath's default: the eBPF backend's
	// --ebpf-pin-path default.
	DefaultEBPFPinPath = "/sys/fs/bpf/kpng"
	// EBPFInterfacesAuto, alone in ebpf.interfaces, means the interfaces
	// holding the node's addresses; it is the default.
	EBPFInterfacesAuto = "auto"
)

// SetDefaults fills every unset field of obj with its v1alpha2 default: the
// v1alpha1 defaults of kube-proxy v1.36 for the fields KEP-784 moves unchanged,
// plus the new defaults (iptables.localhostNodePorts false,
// bindAddressHardFail true, configHardFail true, ipvs.masqueradeBit 14),
// and kpng's ebpf section (interfaces [auto], pinPath /sys/fs/bpf/kpng).
// Health and metrics listeners default to IPv6 when the first nodeIPOverride
// entry is an IPv6 address, as v1alpha1 did from bindAddress.
// SetDefaults is idempotent.
func SetDefaults(obj *KubeProxyConfiguration) {
	ipv6 := false
	if len(obj.NodeIPOverride) > 0 {
		ip := netutils.ParseIPSloppy(obj.NodeIPOverride[0])
		ipv6 = ip != nil && ip.To4() == nil
	}
	healthz, metrics := defaults.Addresses(ipv6)
	if obj.HealthzBindAddress == "" {
		obj.HealthzBindAddress = healthz
	} else {
		obj.HealthzBindAddress = defaults.AppendPortIfNeeded(obj.HealthzBindAddress, defaults.HealthzPort)
	}
	if obj.MetricsBindAddress == "" {
		obj.MetricsBindAddress = metrics
	} else {
		obj.MetricsBindAddress = defaults.AppendPortIfNeeded(obj.MetricsBindAddress, defaults.MetricsPort)
	}
	if obj.BindAddressHardFail == nil {
		obj.BindAddressHardFail = ptr(DefaultBindAddressHardFail)
	}
	if obj.ConfigHardFail == nil {
		obj.ConfigHardFail = ptr(DefaultConfigHardFail)
	}

	if obj.Linux.OOMScoreAdj == nil {
		obj.Linux.OOMScoreAdj = ptr(defaults.OOMScoreAdj)
	}
	ct := &obj.Linux.Conntrack
	if ct.MaxPerCore == nil {
		ct.MaxPerCore = ptr(defaults.ConntrackMaxPerCore)
	}
	if ct.Min == nil {
		ct.Min = ptr(defaults.ConntrackMin)
	}
	if ct.TCPEstablishedTimeout == nil {
		ct.TCPEstablishedTimeout = &metav1.Duration{Duration: defaults.ConntrackTCPEstablishedTimeout}
	}
	if ct.TCPCloseWaitTimeout == nil {
		ct.TCPCloseWaitTimeout = &metav1.Duration{Duration: defaults.ConntrackTCPCloseWaitTimeout}
	}

	setDuration(&obj.SyncPeriod, defaults.SyncPeriod)
	if obj.MinSyncPeriod == nil {
		obj.MinSyncPeriod = &metav1.Duration{Duration: defaults.MinSyncPeriod}
	}
	setDuration(&obj.ConfigSyncPeriod, defaults.ConfigSyncPeriod)

	if obj.IPTables.MasqueradeBit == nil {
		obj.IPTables.MasqueradeBit = ptr(defaults.MasqueradeBit)
	}
	if obj.IPTables.LocalhostNodePorts == nil {
		obj.IPTables.LocalhostNodePorts = ptr(DefaultLocalhostNodePorts)
	}
	if obj.IPVS.MasqueradeBit == nil {
		obj.IPVS.MasqueradeBit = ptr(defaults.MasqueradeBit)
	}
	if obj.NFTables.MasqueradeBit == nil {
		obj.NFTables.MasqueradeBit = ptr(defaults.MasqueradeBit)
	}

	// kpng's own section; ebpf.cgroupPath's default is empty (the cgroup
	// v2 root). An explicit empty interfaces list means none: only null
	// takes the default.
	if obj.EBPF.Interfaces == nil {
		obj.EBPF.Interfaces = []string{EBPFInterfacesAuto}
	}
	if obj.EBPF.PinPath == "" {
		obj.EBPF.PinPath = DefaultEBPFPinPath
	}

	if obj.ClientConnection.ContentType == "" {
		obj.ClientConnection.ContentType = defaults.ContentType
	}
	if obj.ClientConnection.QPS == 0 {
		obj.ClientConnection.QPS = defaults.QPS
	}
	if obj.ClientConnection.Burst == 0 {
		obj.ClientConnection.Burst = defaults.Burst
	}
	if obj.FeatureGates == nil {
		obj.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&obj.Logging)
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func ptr[T any](v T) *T { return &v }
