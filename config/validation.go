package config

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"
)

// Validate checks cfg against every rule kube-proxy v1.36 applies to its
// configuration plus v1alpha2's own (ipFamilyPolicy, nodeIPOverride,
// ipvs.masqueradeBit). Errors name the v1alpha2 field path. Proxy modes are
// checked for the platform kpng runs on (see ValidateFor).
func Validate(cfg *KubeProxyConfiguration) field.ErrorList {
	return ValidateFor(cfg, runtime.GOOS)
}

// ValidateFor is Validate for the operating system goos: "windows" accepts
// only the kernelspace mode, anything else only iptables, ipvs and nftables
// (and, everywhere, the empty mode, meaning the platform default).
//
// As in kube-proxy, the ipvs section is checked only in ipvs mode and
// nftables.masqueradeBit only in nftables mode, so a file that kube-proxy
// accepts is accepted here too. The fields v1alpha2 adds are always checked,
// kpng's ebpf section among them (no kube-proxy file can hold it).
func ValidateFor(cfg *KubeProxyConfiguration, goos string) field.ErrorList {
	return validateFor(cfg, goos, nil)
}

// validateFor is ValidateFor in which each mode of extra is valid too.
func validateFor(cfg *KubeProxyConfiguration, goos string, extra []ProxyMode) field.ErrorList {
	var errs field.ErrorList
	if cfg == nil {
		return field.ErrorList{field.Required(field.NewPath(""), "configuration is missing")}
	}

	errs = append(errs, validateFeatureGates(cfg.FeatureGates, field.NewPath("featureGates"))...)
	errs = append(errs, validateMasqueradeBit(cfg.IPTables.MasqueradeBit, field.NewPath("iptables", "masqueradeBit"))...)
	errs = append(errs, validateMasqueradeBit(cfg.IPVS.MasqueradeBit, field.NewPath("ipvs", "masqueradeBit"))...)
	switch cfg.Mode {
	case ProxyModeIPVS:
		errs = append(errs, validateIPVS(&cfg.IPVS, field.NewPath("ipvs"))...)
	case ProxyModeNFTables:
		errs = append(errs, validateMasqueradeBit(cfg.NFTables.MasqueradeBit, field.NewPath("nftables", "masqueradeBit"))...)
	}
	errs = append(errs, validateLinux(&cfg.Linux, field.NewPath("linux"))...)
	errs = append(errs, validateMode(cfg.Mode, goos, extra, field.NewPath("mode"))...)

	if cfg.ClientConnection.Burst < 0 {
		errs = append(errs, field.Invalid(field.NewPath("clientConnection", "burst"), cfg.ClientConnection.Burst, "must be greater than or equal to 0"))
	}
	if cfg.ConfigSyncPeriod <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("configSyncPeriod"), cfg.ConfigSyncPeriod.String(), "must be greater than 0"))
	}
	errs = append(errs, validateSyncPeriods(cfg.SyncPeriod, cfg.MinSyncPeriod)...)

	if cfg.HostnameOverride != "" && strings.TrimSpace(cfg.HostnameOverride) == "" {
		// kube-proxy trims the name and refuses what is left empty; an
		// empty field (not a blank one) means the host name.
		errs = append(errs, field.Invalid(field.NewPath("hostnameOverride"), cfg.HostnameOverride, "must not be blank (leave it empty to use the host name)"))
	}
	errs = append(errs, validateNodeIPs(cfg.NodeIPOverride, cfg.IPFamilyPolicy)...)
	if cfg.HealthzBindAddress != "" {
		errs = append(errs, validateHostPort(cfg.HealthzBindAddress, field.NewPath("healthzBindAddress"))...)
	}
	errs = append(errs, validateHostPort(cfg.MetricsBindAddress, field.NewPath("metricsBindAddress"))...)
	errs = append(errs, validateNodePortAddresses(cfg.NodePortAddresses, field.NewPath("nodePortAddresses"))...)
	errs = append(errs, validateShowHiddenMetricsForVersion(cfg.ShowHiddenMetricsForVersion, field.NewPath("showHiddenMetricsForVersion"))...)
	errs = append(errs, validateDetectLocal(cfg.DetectLocalMode, &cfg.DetectLocal)...)
	errs = append(errs, validateEBPF(&cfg.EBPF, field.NewPath("ebpf"))...)
	errs = append(errs, validateLogging(cfg)...)
	return errs
}

// featureNameRE is the shape of every Kubernetes feature gate name
// (UpperCamelCase letters and digits). kpng cannot know kube-proxy's list of
// gates without depending on the monorepo, so it checks the shape only.
var featureNameRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

func validateFeatureGates(gates map[string]bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := make([]string, 0, len(gates))
	for name := range gates {
		names = append(names, name)
	}
	slices.Sort(names) // stable error order
	for _, name := range names {
		if !featureNameRE.MatchString(name) {
			errs = append(errs, field.Invalid(path.Key(name), name, "must be a feature gate name: an upper-case letter followed by letters and digits"))
		}
	}
	return errs
}

func validateMasqueradeBit(bit int32, path *field.Path) field.ErrorList {
	if bit < 0 || bit > 31 {
		return field.ErrorList{field.Invalid(path, bit, "must be within the range [0, 31]")}
	}
	return nil
}

func validateNonNegative(d time.Duration, path *field.Path) field.ErrorList {
	if d < 0 {
		return field.ErrorList{field.Invalid(path, d.String(), "must be greater than or equal to 0")}
	}
	return nil
}

func validateIPVS(c *IPVSConfiguration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateNonNegative(c.TCPTimeout, path.Child("tcpTimeout"))...)
	errs = append(errs, validateNonNegative(c.TCPFinTimeout, path.Child("tcpFinTimeout"))...)
	errs = append(errs, validateNonNegative(c.UDPTimeout, path.Child("udpTimeout"))...)
	for i, cidr := range c.ExcludeCIDRs {
		if _, _, err := netutils.ParseCIDRSloppy(cidr); err != nil {
			errs = append(errs, field.Invalid(path.Child("excludeCIDRs").Index(i), cidr, "must be a valid CIDR"))
		}
	}
	return errs
}

func validateLinux(c *LinuxConfiguration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	ct, ctPath := &c.Conntrack, path.Child("conntrack")
	if ct.MaxPerCore < 0 {
		errs = append(errs, field.Invalid(ctPath.Child("maxPerCore"), ct.MaxPerCore, "must be greater than or equal to 0"))
	}
	if ct.Min < 0 {
		errs = append(errs, field.Invalid(ctPath.Child("min"), ct.Min, "must be greater than or equal to 0"))
	}
	errs = append(errs, validateNonNegative(ct.TCPEstablishedTimeout, ctPath.Child("tcpEstablishedTimeout"))...)
	errs = append(errs, validateNonNegative(ct.TCPCloseWaitTimeout, ctPath.Child("tcpCloseWaitTimeout"))...)
	errs = append(errs, validateNonNegative(ct.UDPTimeout, ctPath.Child("udpTimeout"))...)
	errs = append(errs, validateNonNegative(ct.UDPStreamTimeout, ctPath.Child("udpStreamTimeout"))...)
	if c.OOMScoreAdj < -1000 || c.OOMScoreAdj > 1000 {
		errs = append(errs, field.Invalid(path.Child("oomScoreAdj"), c.OOMScoreAdj, "must be within the range [-1000, 1000]"))
	}
	return errs
}

func validateMode(mode ProxyMode, goos string, extra []ProxyMode, path *field.Path) field.ErrorList {
	valid := []string{string(ProxyModeIPTables), string(ProxyModeIPVS), string(ProxyModeNFTables)}
	if goos == "windows" {
		valid = []string{string(ProxyModeKernelspace)}
	}
	for _, m := range extra {
		if !slices.Contains(valid, string(m)) {
			valid = append(valid, string(m))
		}
	}
	if mode == "" || slices.Contains(valid, string(mode)) {
		return nil
	}
	return field.ErrorList{field.NotSupported(path, string(mode), append(valid, ""))}
}

// validateSyncPeriods reports a minSyncPeriod above syncPeriod on
// syncPeriod, as kube-proxy does; Check's soft mode resets both together.
func validateSyncPeriods(sync, minSync time.Duration) field.ErrorList {
	var errs field.ErrorList
	syncPath, minPath := field.NewPath("syncPeriod"), field.NewPath("minSyncPeriod")
	if sync <= 0 {
		errs = append(errs, field.Invalid(syncPath, sync.String(), "must be greater than 0"))
	}
	if minSync < 0 {
		errs = append(errs, field.Invalid(minPath, minSync.String(), "must be greater than or equal to 0"))
	}
	if minSync > sync {
		errs = append(errs, field.Invalid(syncPath, sync.String(), fmt.Sprintf("must be greater than or equal to minSyncPeriod (%s)", minSync)))
	}
	return errs
}

func validateNodeIPs(ips []string, policy IPFamilyPolicy) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("nodeIPOverride")
	var parsed []net.IP
	for i, s := range ips {
		ip := netutils.ParseIPSloppy(s)
		switch {
		case ip == nil:
			errs = append(errs, field.Invalid(path.Index(i), s, "must be a valid IP address"))
		case ip.IsUnspecified():
			errs = append(errs, field.Invalid(path.Index(i), s, "must be a node IP, not an unspecified address (leave nodeIPOverride empty to detect node IPs)"))
		default:
			parsed = append(parsed, ip)
		}
	}
	switch {
	case len(ips) > 2:
		errs = append(errs, field.TooMany(path, len(ips), 2))
	case len(parsed) == 2 && netutils.IsIPv4(parsed[0]) == netutils.IsIPv4(parsed[1]):
		errs = append(errs, field.Invalid(path, ips, "two IPs must be a dual-stack pair (one IPv4, one IPv6)"))
	}

	policyPath := field.NewPath("ipFamilyPolicy")
	switch policy {
	case "", IPFamilyPolicyPreferDualStack, IPFamilyPolicyRequireDualStack:
	case IPFamilyPolicySingleStack:
		if len(ips) == 2 {
			errs = append(errs, field.Invalid(policyPath, policy, "contradicts the dual-stack nodeIPOverride"))
		}
	default:
		errs = append(errs, field.NotSupported(policyPath, string(policy), []string{
			string(IPFamilyPolicySingleStack), string(IPFamilyPolicyPreferDualStack), string(IPFamilyPolicyRequireDualStack), "",
		}))
	}
	return errs
}

func validateHostPort(input string, path *field.Path) field.ErrorList {
	host, port, err := net.SplitHostPort(input)
	if err != nil {
		return field.ErrorList{field.Invalid(path, input, "must be IP:port")}
	}
	var errs field.ErrorList
	if netutils.ParseIPSloppy(host) == nil {
		errs = append(errs, field.Invalid(path, host, "must be a valid IP"))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		errs = append(errs, field.Invalid(path, port, "must be a valid port"))
	}
	return errs
}

func validateNodePortAddresses(addrs []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, a := range addrs {
		if a == NodePortAddressesPrimary {
			if i != 0 || len(addrs) != 1 {
				errs = append(errs, field.Invalid(path.Index(i), a, "can't use both 'primary' and CIDRs"))
			}
			break
		}
		if _, _, err := netutils.ParseCIDRSloppy(a); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), a, "must be a valid CIDR or 'primary'"))
		}
	}
	return errs
}

func validateDetectLocal(mode LocalMode, c *DetectLocalConfiguration) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("detectLocal")
	switch mode {
	case LocalModeBridgeInterface:
		if c.BridgeInterface == "" {
			errs = append(errs, field.Required(path.Child("bridgeInterface"), "detectLocalMode BridgeInterface needs a bridge interface"))
		}
	case LocalModeInterfaceNamePrefix:
		if c.InterfaceNamePrefix == "" {
			errs = append(errs, field.Required(path.Child("interfaceNamePrefix"), "detectLocalMode InterfaceNamePrefix needs an interface name prefix"))
		}
	case LocalModeClusterCIDR, "":
		// The empty mode means ClusterCIDR in kube-proxy.
		if len(c.ClusterCIDRs) > 0 {
			errs = append(errs, validateDualStackCIDRs(c.ClusterCIDRs, path.Child("clusterCIDRs"))...)
		}
	case LocalModeNodeCIDR:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("detectLocalMode"), string(mode), []string{
			string(LocalModeClusterCIDR), string(LocalModeNodeCIDR), string(LocalModeBridgeInterface), string(LocalModeInterfaceNamePrefix), "",
		}))
	}
	return errs
}

func validateDualStackCIDRs(cidrs []string, path *field.Path) field.ErrorList {
	if len(cidrs) > 2 {
		return field.ErrorList{field.TooMany(path, len(cidrs), 2)}
	}
	var errs field.ErrorList
	for i, s := range cidrs {
		if _, _, err := netutils.ParseCIDRSloppy(s); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), s, "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)"))
		}
	}
	if len(errs) == 0 && len(cidrs) == 2 {
		if dual, err := netutils.IsDualStackCIDRStrings(cidrs); err == nil && !dual {
			errs = append(errs, field.Invalid(path, strings.Join(cidrs, ","), "two CIDRs must be a dual-stack pair (e.g. [10.100.0.0/16, fde4:8dba:82e1::/48])"))
		}
	}
	return errs
}

// validateEBPF checks kpng's ebpf section, the eBPF backend's flags.
func validateEBPF(c *EBPFConfiguration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.CgroupPath != "" && !filepath.IsAbs(c.CgroupPath) {
		errs = append(errs, field.Invalid(path.Child("cgroupPath"), c.CgroupPath, "must be an absolute path to a cgroup v2 folder (leave it empty for the root of the cgroup v2 hierarchy)"))
	}

	pinPath := path.Child("pinPath")
	switch {
	case c.PinPath == "":
		errs = append(errs, field.Required(pinPath, "a folder on a BPF filesystem, e.g. /sys/fs/bpf/kpng"))
	case !filepath.IsAbs(c.PinPath):
		errs = append(errs, field.Invalid(pinPath, c.PinPath, "must be an absolute path to a folder on a BPF filesystem (e.g. /sys/fs/bpf/kpng)"))
	case slices.Contains(strings.Split(c.PinPath, "/"), ".."):
		errs = append(errs, field.Invalid(pinPath, c.PinPath, "must not contain '..': --cleanup deletes this folder and everything in it"))
	case filepath.Clean(c.PinPath) == "/":
		errs = append(errs, field.Invalid(pinPath, c.PinPath, "must be a folder of its own, not the root: --cleanup deletes this folder and everything in it"))
	}

	ifPath := path.Child("interfaces")
	seen := map[string]bool{}
	for i, name := range c.Interfaces {
		p := ifPath.Index(i)
		switch {
		case name == EBPFInterfacesAuto:
			if len(c.Interfaces) != 1 {
				errs = append(errs, field.Invalid(p, name, `"auto" (the interfaces holding the node's addresses) must be the only entry`))
			}
		case name == "none":
			errs = append(errs, field.Invalid(p, name, `"none" is the flag's spelling; write interfaces: [] for no interfaces`))
		case seen[name]:
			errs = append(errs, field.Duplicate(p, name))
		default:
			if msg := invalidInterfaceName(name); msg != "" {
				errs = append(errs, field.Invalid(p, name, msg))
			}
		}
		seen[name] = true
	}
	return errs
}

// invalidInterfaceName says why name cannot be a Linux network interface
// name (the kernel's dev_valid_name), or, for a comma, cannot reach the
// backend's comma-separated --ebpf-interfaces; "" when it can.
func invalidInterfaceName(name string) string {
	switch {
	case name == "":
		return "must be an interface name, not empty"
	case len(name) > 15:
		return "must be an interface name, at most 15 bytes long"
	case name == "." || name == "..":
		return "must be an interface name, not . or .."
	case strings.ContainsAny(name, "/:,") || strings.IndexFunc(name, unicode.IsSpace) >= 0:
		return "must be an interface name: no '/', ':', ',' or white space"
	}
	return ""
}

// LoggingFeatureGate returns a feature gate holding the logging features
// (LoggingAlphaOptions, ContextualLogging, ...) set as cfg.FeatureGates
// asks, for validating and applying cfg.Logging
// (logsapi.ValidateAndApply). Gates that are not about logging are ignored.
func LoggingFeatureGate(cfg *KubeProxyConfiguration) (featuregate.MutableFeatureGate, error) {
	gate := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gate); err != nil {
		return nil, err
	}
	known := gate.GetAll()
	logGates := map[string]bool{}
	for name, on := range cfg.FeatureGates {
		if _, ok := known[featuregate.Feature(name)]; ok {
			logGates[name] = on
		}
	}
	if err := gate.SetFromMap(logGates); err != nil {
		return gate, fmt.Errorf("featureGates: %w", err)
	}
	return gate, nil
}

// validateLogging runs component-base's logging validation with the logging
// feature gates (LoggingAlphaOptions, ...) set as the configuration asks.
// The "json" format is accepted only when the binary links
// k8s.io/component-base/logs/json/register, as in kube-proxy (kpng's
// command does).
func validateLogging(cfg *KubeProxyConfiguration) field.ErrorList {
	gate, err := LoggingFeatureGate(cfg)
	if gate == nil {
		return field.ErrorList{field.InternalError(field.NewPath("logging"), err)}
	}
	var errs field.ErrorList
	if err != nil {
		errs = append(errs, field.Invalid(field.NewPath("featureGates"), cfg.FeatureGates, err.Error()))
	}
	return append(errs, logsapi.Validate(&cfg.Logging, gate, field.NewPath("logging"))...)
}

// KubernetesMinor is the Kubernetes release whose kube-proxy kpng stands in
// for (its configuration, flags and metrics): the minor version of the
// k8s.io/kube-proxy module kpng is built with.
const KubernetesMinor = "1.36"

// validateShowHiddenMetricsForVersion is kube-proxy's rule: empty, or the
// minor release before kube-proxy's own. kube-proxy compares with its
// binary's version; kpng's binary carries kpng's own version, so the
// comparison is with the kube-proxy release kpng stands in for.
func validateShowHiddenMetricsForVersion(v string, path *field.Path) field.ErrorList {
	if v == "" {
		return nil
	}
	major, minor, _ := strings.Cut(KubernetesMinor, ".")
	m, _ := strconv.Atoi(minor)
	previous := major + "." + strconv.Itoa(m-1)
	if v != previous {
		return field.ErrorList{field.Invalid(path, v, fmt.Sprintf("must be omitted or have the value %q; only the previous minor version (of kube-proxy %s, which kpng stands in for) is allowed", previous, KubernetesMinor))}
	}
	return nil
}
