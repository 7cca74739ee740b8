package kubeproxy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kpng/kpng/config"
)

// Settings that kube-proxy takes and kpng does not use. None is dropped
// silently: each is a warning naming it and saying why, or, for a setting
// whose effect kpng cannot give, an error unless configHardFail is false.

// kubeProxyConfigSyncPeriod is configSyncPeriod's default (v1alpha1 and
// v1alpha2).
const kubeProxyConfigSyncPeriod = 15 * time.Minute

// unusedFlags returns a warning for each flag given on fs that changes
// nothing in kpng; applied are the configuration flags that were applied,
// mode the configuration's.
func unusedFlags(fs *pflag.FlagSet, applied []string, mode config.ProxyMode) []string {
	var warnings []string
	for _, name := range applied {
		if strings.HasPrefix(name, "ipvs-") && mode != config.ProxyModeIPVS {
			warnings = append(warnings, fmt.Sprintf("--%s has no effect in mode %q (kube-proxy reads it only in ipvs mode)", name, mode))
		}
	}
	for _, name := range []string{"boot-id-file", "machine-id-file"} {
		if fs.Changed(name) {
			warnings = append(warnings, fmt.Sprintf("--%s has no effect, as in kube-proxy (whose binary registers it for cadvisor)", name))
		}
	}
	return warnings
}

// unsupportedFields checks c for settings kpng does not implement. A
// setting kpng has no use for is a warning; one whose effect kpng cannot
// give is an error when c.ConfigHardFail, and otherwise a warning with the
// field reset to its default in the returned copy.
func unsupportedFields(c *config.KubeProxyConfiguration) (*config.KubeProxyConfiguration, []string, error) {
	c = c.DeepCopy()
	var warnings, problems []string
	if c.ConfigSyncPeriod != kubeProxyConfigSyncPeriod {
		warnings = append(warnings, fmt.Sprintf("configSyncPeriod=%s has no effect in kpng: it is kube-proxy's informer resync period, and kpng's cluster store changes only on watch events, which a resync of unchanged objects does not bring", c.ConfigSyncPeriod))
	}
	// A gate kube-proxy refuses is fatal there whatever configHardFail
	// says (its Complete fails): here too.
	gateWarning, err := CheckFeatureGates(c.FeatureGates)
	if err != nil {
		return nil, nil, err
	}
	if gateWarning != "" {
		warnings = append(warnings, gateWarning)
	}
	if w := ebpfOutsideItsMode(c); w != "" {
		warnings = append(warnings, w)
	}
	if c.IPFamilyPolicy != "" {
		problems = append(problems, fmt.Sprintf("ipFamilyPolicy=%q is not implemented by kpng (the node's IPs are those of its Node object, and nodeIPOverride)", c.IPFamilyPolicy))
		c.IPFamilyPolicy = ""
	}
	if len(problems) > 0 && c.ConfigHardFail {
		return nil, nil, fmt.Errorf("configuration not supported by kpng (configHardFail is true): %s", joinProblems(problems))
	}
	for _, p := range problems {
		warnings = append(warnings, "ignored (configHardFail is false): "+p)
	}
	return c, warnings, nil
}

// ebpfOutsideItsMode returns a warning naming the ebpf fields set to other
// than their default when the mode is not ebpf: only the eBPF backend reads
// them. (kube-proxy's own sections of other modes stay silent, as in
// kube-proxy; no kube-proxy file holds this one.)
func ebpfOutsideItsMode(c *config.KubeProxyConfiguration) string {
	if c.Mode == config.ProxyModeEBPF {
		return ""
	}
	def := config.Default().EBPF
	var set []string
	if c.EBPF.CgroupPath != def.CgroupPath {
		set = append(set, "ebpf.cgroupPath")
	}
	if !slices.Equal(c.EBPF.Interfaces, def.Interfaces) {
		set = append(set, "ebpf.interfaces")
	}
	if c.EBPF.PinPath != def.PinPath {
		set = append(set, "ebpf.pinPath")
	}
	if len(set) == 0 {
		return ""
	}
	mode := c.Mode
	if mode == "" {
		mode = config.ProxyModeIPTables
	}
	verb := "have"
	if len(set) == 1 {
		verb = "has"
	}
	return fmt.Sprintf("%s %s no effect in mode %s: only mode ebpf reads them", strings.Join(set, ", "), verb, mode)
}
