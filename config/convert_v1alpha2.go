package config

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpng/kpng/config/v1alpha2"
)

// FromV1Alpha2 converts a v1alpha2 configuration to the hub type. Unset
// fields take their v1alpha2 defaults; in is not modified. The hub has the
// shape of v1alpha2, so this conversion cannot fail.
func FromV1Alpha2(in *v1alpha2.KubeProxyConfiguration) *KubeProxyConfiguration {
	// A shallow copy is enough: SetDefaults only replaces fields of c, it
	// never writes through pointers, slices or maps shared with in.
	c := *in
	v1alpha2.SetDefaults(&c)

	ct := c.Linux.Conntrack
	return &KubeProxyConfiguration{
		Linux: LinuxConfiguration{
			Conntrack: ConntrackConfiguration{
				MaxPerCore:            *ct.MaxPerCore,
				Min:                   *ct.Min,
				TCPEstablishedTimeout: ct.TCPEstablishedTimeout.Duration,
				TCPCloseWaitTimeout:   ct.TCPCloseWaitTimeout.Duration,
				TCPBeLiberal:          ct.TCPBeLiberal,
				UDPTimeout:            ct.UDPTimeout.Duration,
				UDPStreamTimeout:      ct.UDPStreamTimeout.Duration,
			},
			MasqueradeAll: c.Linux.MasqueradeAll,
			OOMScoreAdj:   *c.Linux.OOMScoreAdj,
		},
		Windows:                     WindowsConfiguration{RunAsService: c.Windows.RunAsService},
		FeatureGates:                maps.Clone(c.FeatureGates),
		ClientConnection:            c.ClientConnection,
		Logging:                     *c.Logging.DeepCopy(),
		HostnameOverride:            c.HostnameOverride,
		NodeIPOverride:              slices.Clone(c.NodeIPOverride),
		IPFamilyPolicy:              IPFamilyPolicy(c.IPFamilyPolicy),
		HealthzBindAddress:          c.HealthzBindAddress,
		MetricsBindAddress:          c.MetricsBindAddress,
		BindAddressHardFail:         *c.BindAddressHardFail,
		EnableProfiling:             c.EnableProfiling,
		ShowHiddenMetricsForVersion: c.ShowHiddenMetricsForVersion,
		ConfigHardFail:              *c.ConfigHardFail,
		Mode:                        ProxyMode(c.Mode),
		IPTables: IPTablesConfiguration{
			MasqueradeBit:      *c.IPTables.MasqueradeBit,
			LocalhostNodePorts: *c.IPTables.LocalhostNodePorts,
		},
		IPVS: IPVSConfiguration{
			MasqueradeBit: *c.IPVS.MasqueradeBit,
			Scheduler:     c.IPVS.Scheduler,
			ExcludeCIDRs:  slices.Clone(c.IPVS.ExcludeCIDRs),
			StrictARP:     c.IPVS.StrictARP,
			TCPTimeout:    c.IPVS.TCPTimeout.Duration,
			TCPFinTimeout: c.IPVS.TCPFinTimeout.Duration,
			UDPTimeout:    c.IPVS.UDPTimeout.Duration,
		},
		NFTables:  NFTablesConfiguration{MasqueradeBit: *c.NFTables.MasqueradeBit},
		Winkernel: WinkernelConfiguration(c.Winkernel),
		EBPF: EBPFConfiguration{
			CgroupPath: c.EBPF.CgroupPath,
			Interfaces: slices.Clone(c.EBPF.Interfaces),
			PinPath:    c.EBPF.PinPath,
		},
		DetectLocalMode: LocalMode(c.DetectLocalMode),
		DetectLocal: DetectLocalConfiguration{
			BridgeInterface:     c.DetectLocal.BridgeInterface,
			ClusterCIDRs:        slices.Clone(c.DetectLocal.ClusterCIDRs),
			InterfaceNamePrefix: c.DetectLocal.InterfaceNamePrefix,
		},
		NodePortAddresses: slices.Clone(c.NodePortAddresses),
		SyncPeriod:        c.SyncPeriod.Duration,
		MinSyncPeriod:     c.MinSyncPeriod.Duration,
		ConfigSyncPeriod:  c.ConfigSyncPeriod.Duration,
	}
}

// ToV1Alpha2 converts the hub configuration to v1alpha2, with apiVersion and
// kind set and every field written explicitly. v1alpha2 can express every hub
// value, so this conversion cannot fail.
func ToV1Alpha2(in *KubeProxyConfiguration) *v1alpha2.KubeProxyConfiguration {
	ct := in.Linux.Conntrack
	return &v1alpha2.KubeProxyConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha2.APIVersion, Kind: v1alpha2.Kind},
		Linux: v1alpha2.KubeProxyLinuxConfiguration{
			Conntrack: v1alpha2.KubeProxyConntrackConfiguration{
				MaxPerCore:            ptr(ct.MaxPerCore),
				Min:                   ptr(ct.Min),
				TCPEstablishedTimeout: &metav1.Duration{Duration: ct.TCPEstablishedTimeout},
				TCPCloseWaitTimeout:   &metav1.Duration{Duration: ct.TCPCloseWaitTimeout},
				TCPBeLiberal:          ct.TCPBeLiberal,
				UDPTimeout:            metav1.Duration{Duration: ct.UDPTimeout},
				UDPStreamTimeout:      metav1.Duration{Duration: ct.UDPStreamTimeout},
			},
			MasqueradeAll: in.Linux.MasqueradeAll,
			OOMScoreAdj:   ptr(in.Linux.OOMScoreAdj),
		},
		Windows:                     v1alpha2.KubeProxyWindowsConfiguration{RunAsService: in.Windows.RunAsService},
		FeatureGates:                maps.Clone(in.FeatureGates),
		ClientConnection:            in.ClientConnection,
		Logging:                     *in.Logging.DeepCopy(),
		HostnameOverride:            in.HostnameOverride,
		NodeIPOverride:              slices.Clone(in.NodeIPOverride),
		IPFamilyPolicy:              v1alpha2.IPFamilyPolicy(in.IPFamilyPolicy),
		HealthzBindAddress:          in.HealthzBindAddress,
		MetricsBindAddress:          in.MetricsBindAddress,
		BindAddressHardFail:         ptr(in.BindAddressHardFail),
		EnableProfiling:             in.EnableProfiling,
		ShowHiddenMetricsForVersion: in.ShowHiddenMetricsForVersion,
		ConfigHardFail:              ptr(in.ConfigHardFail),
		Mode:                        v1alpha2.ProxyMode(in.Mode),
		IPTables: v1alpha2.KubeProxyIPTablesConfiguration{
			MasqueradeBit:      ptr(in.IPTables.MasqueradeBit),
			LocalhostNodePorts: ptr(in.IPTables.LocalhostNodePorts),
		},
		IPVS: v1alpha2.KubeProxyIPVSConfiguration{
			MasqueradeBit: ptr(in.IPVS.MasqueradeBit),
			Scheduler:     in.IPVS.Scheduler,
			ExcludeCIDRs:  slices.Clone(in.IPVS.ExcludeCIDRs),
			StrictARP:     in.IPVS.StrictARP,
			TCPTimeout:    metav1.Duration{Duration: in.IPVS.TCPTimeout},
			TCPFinTimeout: metav1.Duration{Duration: in.IPVS.TCPFinTimeout},
			UDPTimeout:    metav1.Duration{Duration: in.IPVS.UDPTimeout},
		},
		NFTables:  v1alpha2.KubeProxyNFTablesConfiguration{MasqueradeBit: ptr(in.NFTables.MasqueradeBit)},
		Winkernel: v1alpha2.KubeProxyWinkernelConfiguration(in.Winkernel),
		EBPF: v1alpha2.KubeProxyEBPFConfiguration{
			CgroupPath: in.EBPF.CgroupPath,
			// Never null: null would read back as the default [auto],
			// while an empty hub list means no interfaces.
			Interfaces: append([]string{}, in.EBPF.Interfaces...),
			PinPath:    in.EBPF.PinPath,
		},
		DetectLocalMode: v1alpha2.LocalMode(in.DetectLocalMode),
		DetectLocal: v1alpha2.DetectLocalConfiguration{
			BridgeInterface:     in.DetectLocal.BridgeInterface,
			ClusterCIDRs:        slices.Clone(in.DetectLocal.ClusterCIDRs),
			InterfaceNamePrefix: in.DetectLocal.InterfaceNamePrefix,
		},
		NodePortAddresses: slices.Clone(in.NodePortAddresses),
		SyncPeriod:        metav1.Duration{Duration: in.SyncPeriod},
		MinSyncPeriod:     &metav1.Duration{Duration: in.MinSyncPeriod},
		ConfigSyncPeriod:  metav1.Duration{Duration: in.ConfigSyncPeriod},
	}
}

func ptr[T any](v T) *T { return &v }
