package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kpv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	netutils "k8s.io/utils/net"

	"github.com/kpng/kpng/config/internal/defaults"
	"github.com/kpng/kpng/config/v1alpha1"
	"github.com/kpng/kpng/config/v1alpha2"
)

// Conversion between kube-proxy's v1alpha1 and the hub.
//
// v1alpha1 keeps syncPeriod, minSyncPeriod and masqueradeAll once per backend;
// the hub (like v1alpha2) keeps them once. The rule, applied after defaulting:
//
//   - The active backend's value wins. The active backend is ipvs for mode
//     ipvs, nftables for mode nftables, and iptables otherwise (including the
//     empty mode and kernelspace), exactly as kube-proxy v1.36 reads them.
//   - Another backend's value is ignored when it equals the active one or that
//     backend's v1alpha1 default (syncPeriod 30s; minSyncPeriod 1s for iptables
//     and nftables, 0s for ipvs; masqueradeAll false): those values say
//     nothing the single field cannot.
//   - Any other disagreement is an error naming both fields, because the user
//     asked for something v1alpha2 cannot express.
//
// Going back, the active backend's fields get the hub value and the other
// backends' fields get their v1alpha1 defaults, so v1alpha2 -> v1alpha1 ->
// v1alpha2 is exact and v1alpha1 -> v1alpha2 -> v1alpha1 is exact whenever the
// inactive backends held defaults.

// backend is one of v1alpha1's per-backend sections.
type backend string

const (
	backendIPTables backend = "iptables"
	backendIPVS     backend = "ipvs"
	backendNFTables backend = "nftables"
)

// activeBackend returns the v1alpha1 section whose sync periods mode uses.
func activeBackend(mode ProxyMode) backend {
	switch mode {
	case ProxyModeIPVS:
		return backendIPVS
	case ProxyModeNFTables:
		return backendNFTables
	default:
		return backendIPTables
	}
}

// masqueradeBackend returns the v1alpha1 section whose masqueradeAll mode
// uses (ipvs mode reads iptables.masqueradeAll).
func masqueradeBackend(mode ProxyMode) backend {
	if mode == ProxyModeNFTables {
		return backendNFTables
	}
	return backendIPTables
}

// v1alpha1MinSyncDefault is minSyncPeriod's v1alpha1 default per backend.
func v1alpha1MinSyncDefault(b backend) time.Duration {
	if b == backendIPVS {
		return 0
	}
	return defaults.MinSyncPeriod
}

// syncPeriods returns a v1alpha1 config's per-backend sync periods.
func syncPeriods(in *kpv1alpha1.KubeProxyConfiguration) (sync, minSync map[backend]time.Duration) {
	sync = map[backend]time.Duration{
		backendIPTables: in.IPTables.SyncPeriod.Duration,
		backendIPVS:     in.IPVS.SyncPeriod.Duration,
		backendNFTables: in.NFTables.SyncPeriod.Duration,
	}
	minSync = map[backend]time.Duration{
		backendIPTables: in.IPTables.MinSyncPeriod.Duration,
		backendIPVS:     in.IPVS.MinSyncPeriod.Duration,
		backendNFTables: in.NFTables.MinSyncPeriod.Duration,
	}
	return sync, minSync
}

// collapse picks the active backend's value of one per-backend field and
// reports every other backend whose value would be lost.
func collapse[T comparable](name string, values map[backend]T, active backend, def func(backend) T) (T, field.ErrorList) {
	var errs field.ErrorList
	want := values[active]
	for _, b := range []backend{backendIPTables, backendIPVS, backendNFTables} {
		v, ok := values[b]
		if !ok || b == active || v == want || v == def(b) {
			continue
		}
		errs = append(errs, field.Invalid(field.NewPath(string(b), name), fmt.Sprint(v),
			fmt.Sprintf("disagrees with %s.%s (%v), which the active mode uses; v1alpha2 has a single %s for every mode, so set the same value (or leave the inactive one unset)",
				active, name, want, v1alpha2Name(name))))
	}
	return want, errs
}

func v1alpha2Name(v1alpha1Name string) string {
	if v1alpha1Name == "masqueradeAll" {
		return "linux.masqueradeAll"
	}
	return v1alpha1Name
}

// FromV1Alpha1 converts kube-proxy's v1alpha1 configuration to the hub. Unset
// fields take kube-proxy v1.36's v1alpha1 defaults first (so, for example,
// iptables.localhostNodePorts stays true and bindAddressHardFail stays false:
// migrating never changes behaviour); in is not modified.
//
// It fails, naming the fields, when v1alpha1 holds data the hub cannot
// (per-backend sync periods or masqueradeAll that disagree, see the rule
// above, or a bindAddress that is not an IP). It returns warnings for data it
// drops on purpose (a non-empty portRange, unused since kube-proxy removed the
// userspace proxy).
func FromV1Alpha1(in *kpv1alpha1.KubeProxyConfiguration) (*KubeProxyConfiguration, []string, error) {
	c := *in // SetDefaults never writes through shared pointers, slices or maps.
	v1alpha1.SetDefaults(&c)

	var errs field.ErrorList
	var warnings []string
	mode := ProxyMode(c.Mode)

	sync, minSync := syncPeriods(&c)
	active := activeBackend(mode)
	syncPeriod, e := collapse("syncPeriod", sync, active, func(backend) time.Duration { return defaults.SyncPeriod })
	errs = append(errs, e...)
	minSyncPeriod, e := collapse("minSyncPeriod", minSync, active, v1alpha1MinSyncDefault)
	errs = append(errs, e...)
	masq := map[backend]bool{backendIPTables: c.IPTables.MasqueradeAll, backendNFTables: c.NFTables.MasqueradeAll}
	masqueradeAll, e := collapse("masqueradeAll", masq, masqueradeBackend(mode), func(backend) bool { return false })
	errs = append(errs, e...)

	var nodeIPs []string
	if ip := netutils.ParseIPSloppy(c.BindAddress); ip == nil {
		errs = append(errs, field.Invalid(field.NewPath("bindAddress"), c.BindAddress, "must be an IP address (it becomes v1alpha2's nodeIPOverride)"))
	} else if !ip.IsUnspecified() {
		// 0.0.0.0 and :: mean "detect the node IP", which is an empty
		// nodeIPOverride. Their only other effect, the family of the default
		// healthz and metrics addresses, was settled by defaulting above.
		nodeIPs = []string{c.BindAddress}
	}

	var clusterCIDRs []string
	if c.ClusterCIDR != "" {
		// No trimming, as in kube-proxy: "a, b" fails validation there too.
		clusterCIDRs = strings.Split(c.ClusterCIDR, ",")
	}

	if c.PortRange != "" {
		warnings = append(warnings, fmt.Sprintf("portRange: %q dropped: kube-proxy no longer uses it and v1alpha2 has no such field", c.PortRange))
	}
	if len(errs) > 0 {
		return nil, warnings, fmt.Errorf("converting %s to the hub: %w", v1alpha1.APIVersion, errs.ToAggregate())
	}

	ct := c.Conntrack
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
			MasqueradeAll: masqueradeAll,
			OOMScoreAdj:   *c.OOMScoreAdj,
		},
		Windows:                     WindowsConfiguration{RunAsService: c.WindowsRunAsService},
		FeatureGates:                maps.Clone(c.FeatureGates),
		ClientConnection:            c.ClientConnection,
		Logging:                     *c.Logging.DeepCopy(),
		HostnameOverride:            c.HostnameOverride,
		NodeIPOverride:              nodeIPs,
		HealthzBindAddress:          c.HealthzBindAddress,
		MetricsBindAddress:          c.MetricsBindAddress,
		BindAddressHardFail:         c.BindAddressHardFail,
		EnableProfiling:             c.EnableProfiling,
		ShowHiddenMetricsForVersion: c.ShowHiddenMetricsForVersion,
		// v1alpha1 has no configHardFail; kube-proxy always treats its
		// configuration errors as fatal.
		ConfigHardFail: true,
		Mode:           mode,
		IPTables: IPTablesConfiguration{
			MasqueradeBit:      *c.IPTables.MasqueradeBit,
			LocalhostNodePorts: *c.IPTables.LocalhostNodePorts,
		},
		IPVS: IPVSConfiguration{
			// kube-proxy's ipvs mode reads iptables.masqueradeBit.
			MasqueradeBit: *c.IPTables.MasqueradeBit,
			Scheduler:     c.IPVS.Scheduler,
			ExcludeCIDRs:  slices.Clone(c.IPVS.ExcludeCIDRs),
			StrictARP:     c.IPVS.StrictARP,
			TCPTimeout:    c.IPVS.TCPTimeout.Duration,
			TCPFinTimeout: c.IPVS.TCPFinTimeout.Duration,
			UDPTimeout:    c.IPVS.UDPTimeout.Duration,
		},
		NFTables:  NFTablesConfiguration{MasqueradeBit: *c.NFTables.MasqueradeBit},
		Winkernel: WinkernelConfiguration(c.Winkernel),
		// kube-proxy's type has no ebpf section: kpng's defaults.
		EBPF:            defaultEBPF(),
		DetectLocalMode: LocalMode(c.DetectLocalMode),
		DetectLocal: DetectLocalConfiguration{
			BridgeInterface:     c.DetectLocal.BridgeInterface,
			ClusterCIDRs:        clusterCIDRs,
			InterfaceNamePrefix: c.DetectLocal.InterfaceNamePrefix,
		},
		NodePortAddresses: slices.Clone(c.NodePortAddresses),
		SyncPeriod:        syncPeriod,
		MinSyncPeriod:     minSyncPeriod,
		ConfigSyncPeriod:  c.ConfigSyncPeriod.Duration,
	}, warnings, nil
}

// ToV1Alpha1 converts the hub configuration to kube-proxy's v1alpha1, for
// users who must hand a file back to kube-proxy. It fails, naming the fields,
// when the configuration uses what v1alpha1 cannot express: two
// nodeIPOverride IPs or one that is not a node IP, an ipFamilyPolicy, configHardFail false, an
// ipvs.masqueradeBit different from iptables.masqueradeBit (v1alpha1's ipvs
// mode reads the latter), a zero minSyncPeriod for iptables or nftables
// (v1alpha1 turns 0s into 1s there), a cluster CIDR containing a comma, or
// an ebpf field other than its default (kube-proxy's type has no ebpf
// section).
func ToV1Alpha1(in *KubeProxyConfiguration) (*kpv1alpha1.KubeProxyConfiguration, error) {
	var errs field.ErrorList
	const cannot = "v1alpha1 cannot express this"

	bindAddress := v1alpha1.DefaultBindAddress
	switch len(in.NodeIPOverride) {
	case 0:
	case 1:
		// Only a node IP comes back: v1alpha1 defaulting reads an empty
		// bindAddress, like 0.0.0.0 and ::, as "detect", and FromV1Alpha1
		// refuses one that is no IP.
		if ip := netutils.ParseIPSloppy(in.NodeIPOverride[0]); ip == nil || ip.IsUnspecified() {
			errs = append(errs, field.Invalid(field.NewPath("nodeIPOverride").Index(0), in.NodeIPOverride[0], cannot+": bindAddress holds a node IP, and reads an empty or unspecified one as none"))
		} else {
			bindAddress = in.NodeIPOverride[0]
		}
	default:
		errs = append(errs, field.Invalid(field.NewPath("nodeIPOverride"), in.NodeIPOverride, cannot+": bindAddress holds a single IP"))
	}
	if in.IPFamilyPolicy != "" {
		errs = append(errs, field.Invalid(field.NewPath("ipFamilyPolicy"), in.IPFamilyPolicy, cannot+": v1alpha1 has no ipFamilyPolicy"))
	}
	if !in.ConfigHardFail {
		errs = append(errs, field.Invalid(field.NewPath("configHardFail"), in.ConfigHardFail, cannot+": v1alpha1 configuration errors are always fatal"))
	}
	if in.IPVS.MasqueradeBit != in.IPTables.MasqueradeBit {
		errs = append(errs, field.Invalid(field.NewPath("ipvs", "masqueradeBit"), in.IPVS.MasqueradeBit,
			fmt.Sprintf("%s: differs from iptables.masqueradeBit (%d), which v1alpha1's ipvs mode uses", cannot, in.IPTables.MasqueradeBit)))
	}
	active := activeBackend(in.Mode)
	if in.MinSyncPeriod == 0 && active != backendIPVS {
		errs = append(errs, field.Invalid(field.NewPath("minSyncPeriod"), "0s",
			fmt.Sprintf("%s: v1alpha1 turns %s.minSyncPeriod 0s into its default 1s", cannot, active)))
	}
	for i, cidr := range in.DetectLocal.ClusterCIDRs {
		if strings.Contains(cidr, ",") {
			errs = append(errs, field.Invalid(field.NewPath("detectLocal", "clusterCIDRs").Index(i), cidr, cannot+": v1alpha1's clusterCIDR is comma-separated"))
		}
	}
	errs = append(errs, ebpfToV1Alpha1(&in.EBPF)...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("converting to %s: %w", v1alpha1.APIVersion, errs.ToAggregate())
	}

	sync := func(b backend) metav1.Duration {
		if b == active {
			return metav1.Duration{Duration: in.SyncPeriod}
		}
		return metav1.Duration{Duration: defaults.SyncPeriod}
	}
	minSync := func(b backend) metav1.Duration {
		if b == active {
			return metav1.Duration{Duration: in.MinSyncPeriod}
		}
		return metav1.Duration{Duration: v1alpha1MinSyncDefault(b)}
	}
	masq := masqueradeBackend(in.Mode)

	ct := in.Linux.Conntrack
	return &kpv1alpha1.KubeProxyConfiguration{
		TypeMeta:                    metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.Kind},
		FeatureGates:                maps.Clone(in.FeatureGates),
		ClientConnection:            in.ClientConnection,
		Logging:                     *in.Logging.DeepCopy(),
		HostnameOverride:            in.HostnameOverride,
		BindAddress:                 bindAddress,
		HealthzBindAddress:          in.HealthzBindAddress,
		MetricsBindAddress:          in.MetricsBindAddress,
		BindAddressHardFail:         in.BindAddressHardFail,
		EnableProfiling:             in.EnableProfiling,
		ShowHiddenMetricsForVersion: in.ShowHiddenMetricsForVersion,
		Mode:                        kpv1alpha1.ProxyMode(in.Mode),
		IPTables: kpv1alpha1.KubeProxyIPTablesConfiguration{
			MasqueradeBit:      ptr(in.IPTables.MasqueradeBit),
			MasqueradeAll:      masq == backendIPTables && in.Linux.MasqueradeAll,
			LocalhostNodePorts: ptr(in.IPTables.LocalhostNodePorts),
			SyncPeriod:         sync(backendIPTables),
			MinSyncPeriod:      minSync(backendIPTables),
		},
		IPVS: kpv1alpha1.KubeProxyIPVSConfiguration{
			SyncPeriod:    sync(backendIPVS),
			MinSyncPeriod: minSync(backendIPVS),
			Scheduler:     in.IPVS.Scheduler,
			ExcludeCIDRs:  slices.Clone(in.IPVS.ExcludeCIDRs),
			StrictARP:     in.IPVS.StrictARP,
			TCPTimeout:    metav1.Duration{Duration: in.IPVS.TCPTimeout},
			TCPFinTimeout: metav1.Duration{Duration: in.IPVS.TCPFinTimeout},
			UDPTimeout:    metav1.Duration{Duration: in.IPVS.UDPTimeout},
		},
		NFTables: kpv1alpha1.KubeProxyNFTablesConfiguration{
			MasqueradeBit: ptr(in.NFTables.MasqueradeBit),
			MasqueradeAll: masq == backendNFTables && in.Linux.MasqueradeAll,
			SyncPeriod:    sync(backendNFTables),
			MinSyncPeriod: minSync(backendNFTables),
		},
		Winkernel:       kpv1alpha1.KubeProxyWinkernelConfiguration(in.Winkernel),
		DetectLocalMode: kpv1alpha1.LocalMode(in.DetectLocalMode),
		DetectLocal: kpv1alpha1.DetectLocalConfiguration{
			BridgeInterface:     in.DetectLocal.BridgeInterface,
			InterfaceNamePrefix: in.DetectLocal.InterfaceNamePrefix,
		},
		ClusterCIDR:       strings.Join(in.DetectLocal.ClusterCIDRs, ","),
		NodePortAddresses: slices.Clone(in.NodePortAddresses),
		OOMScoreAdj:       ptr(in.Linux.OOMScoreAdj),
		Conntrack: kpv1alpha1.KubeProxyConntrackConfiguration{
			MaxPerCore:            ptr(ct.MaxPerCore),
			Min:                   ptr(ct.Min),
			TCPEstablishedTimeout: &metav1.Duration{Duration: ct.TCPEstablishedTimeout},
			TCPCloseWaitTimeout:   &metav1.Duration{Duration: ct.TCPCloseWaitTimeout},
			TCPBeLiberal:          ct.TCPBeLiberal,
			UDPTimeout:            metav1.Duration{Duration: ct.UDPTimeout},
			UDPStreamTimeout:      metav1.Duration{Duration: ct.UDPStreamTimeout},
		},
		ConfigSyncPeriod:    metav1.Duration{Duration: in.ConfigSyncPeriod},
		WindowsRunAsService: in.Windows.RunAsService,
	}, nil
}

// defaultEBPF is the ebpf section's v1alpha2 default: what a v1alpha1 file,
// which cannot hold the section, converts to.
func defaultEBPF() EBPFConfiguration {
	return EBPFConfiguration{
		Interfaces: []string{v1alpha2.EBPFInterfacesAuto},
		PinPath:    v1alpha2.DefaultEBPFPinPath,
	}
}

// ebpfToV1Alpha1 names each ebpf field that holds other than its default:
// kube-proxy's v1alpha1 type (decoded strictly) has no place for kpng's
// section, and a conversion that dropped the field would change what the
// eBPF backend does when the file is read back.
func ebpfToV1Alpha1(c *EBPFConfiguration) field.ErrorList {
	var errs field.ErrorList
	def := defaultEBPF()
	path := field.NewPath("ebpf")
	const cannot = "v1alpha1 cannot express this: kube-proxy's type has no ebpf section (kpng's own), so only the default converts"
	if c.CgroupPath != def.CgroupPath {
		errs = append(errs, field.Invalid(path.Child("cgroupPath"), c.CgroupPath, cannot+` (""): keep the file in v1alpha2`))
	}
	if !slices.Equal(c.Interfaces, def.Interfaces) {
		errs = append(errs, field.Invalid(path.Child("interfaces"), c.Interfaces, cannot+" ([auto]): keep the file in v1alpha2"))
	}
	if c.PinPath != def.PinPath {
		errs = append(errs, field.Invalid(path.Child("pinPath"), c.PinPath, fmt.Sprintf("%s (%s): keep the file in v1alpha2", cannot, def.PinPath)))
	}
	return errs
}
