package kubeproxy

import (
	"fmt"
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
// nothing in kpng; applied are the configuration flags that were applied.
func unusedFlags(fs *pflag.FlagSet, applied []string) []string {
	var warnings []string
	for _, name := range applied {
		if strings.HasPrefix(name, "ipvs-") {
			warnings = append(warnings, fmt.Sprintf("--%s has no effect: kpng has no ipvs mode (kube-proxy reads it only in ipvs mode)", name))
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
