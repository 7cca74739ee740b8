package config

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kpng/kpng/config/v1alpha2"
)

// Check validates cfg and applies its configHardFail setting, for the
// command line to call once flags have been applied:
//
//   - cfg is valid: it returns cfg, no warnings, no error.
//   - cfg is invalid and ConfigHardFail is true: it returns the validation
//     errors as an error (the daemon should exit).
//   - cfg is invalid and ConfigHardFail is false: it returns a copy of cfg in
//     which every field named by an error is reset to its v1alpha2 default,
//     and the errors as warnings. Fields that only make sense together are
//     reset together (syncPeriod with minSyncPeriod, detectLocal.* with
//     detectLocalMode). If the result is still invalid, it returns an error.
//
// cfg is never modified.
func Check(cfg *KubeProxyConfiguration) (*KubeProxyConfiguration, field.ErrorList, error) {
	return check(cfg, Validate)
}

// CheckModes is Check for a program that runs modes of its own beside
// kube-proxy's (kpng's ebpf): each mode of extra is valid too.
func CheckModes(cfg *KubeProxyConfiguration, extra ...ProxyMode) (*KubeProxyConfiguration, field.ErrorList, error) {
	return check(cfg, func(c *KubeProxyConfiguration) field.ErrorList {
		return validateFor(c, runtime.GOOS, extra)
	})
}

func check(cfg *KubeProxyConfiguration, validate func(*KubeProxyConfiguration) field.ErrorList) (*KubeProxyConfiguration, field.ErrorList, error) {
	if cfg == nil {
		return nil, nil, fmt.Errorf("invalid configuration: configuration is missing")
	}
	errs := validate(cfg)
	if len(errs) == 0 {
		return cfg, nil, nil
	}
	if cfg.ConfigHardFail {
		return nil, nil, fmt.Errorf("invalid configuration (configHardFail is true): %w", errs.ToAggregate())
	}

	warnings := errs
	fixed := cfg
	// Each pass resets what the previous one reported; resetting a field can
	// only make a related rule fail, which the related-field table handles,
	// so two passes settle every rule; the third is a safety margin.
	for pass := 0; pass < 3 && len(errs) > 0; pass++ {
		var err error
		if fixed, err = resetFields(fixed, errs); err != nil {
			return nil, nil, fmt.Errorf("resetting invalid fields to defaults: %w", err)
		}
		errs = validate(fixed)
		warnings = append(warnings, errs...)
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("invalid configuration even after resetting bad fields to defaults: %w", errs.ToAggregate())
	}
	return fixed, dedupe(warnings), nil
}

// relatedFields lists fields reset together with a field, because a rule ties
// them: resetting one alone could leave the pair still invalid.
var relatedFields = map[string][]string{
	"syncPeriod":                      {"minSyncPeriod"},
	"minSyncPeriod":                   {"syncPeriod"},
	"detectLocal.bridgeInterface":     {"detectLocalMode"},
	"detectLocal.interfaceNamePrefix": {"detectLocalMode"},
	"detectLocal.clusterCIDRs":        {"detectLocalMode"},
	"ipFamilyPolicy":                  {"nodeIPOverride"},
	"nodeIPOverride":                  {"ipFamilyPolicy"},
}

// resetFields returns a copy of cfg in which the field of every error is set
// to its v1alpha2 default. It works on the v1alpha2 JSON form, where error
// paths name fields directly.
func resetFields(cfg *KubeProxyConfiguration, errs field.ErrorList) (*KubeProxyConfiguration, error) {
	current, err := toJSONMap(ToV1Alpha2(cfg))
	if err != nil {
		return nil, err
	}
	defaults, err := toJSONMap(ToV1Alpha2(Default()))
	if err != nil {
		return nil, err
	}
	for _, e := range errs {
		path := e.Field
		if gate, ok := strings.CutPrefix(path, "featureGates["); ok {
			// A bad gate name is dropped, not the whole map.
			if gates, ok := current["featureGates"].(map[string]any); ok {
				delete(gates, strings.TrimSuffix(gate, "]"))
			}
			continue
		}
		if i := strings.IndexByte(path, '['); i >= 0 {
			path = path[:i] // a bad list element resets the whole list
		}
		for _, p := range append([]string{path}, relatedFields[path]...) {
			resetPath(current, defaults, strings.Split(p, "."))
		}
	}
	js, err := json.Marshal(current)
	if err != nil {
		return nil, err
	}
	var obj v1alpha2.KubeProxyConfiguration
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, err
	}
	return FromV1Alpha2(&obj), nil
}

// resetPath copies the value at path from defaults into current (deleting it
// when defaults has none).
func resetPath(current, defaults map[string]any, path []string) {
	for len(path) > 1 {
		c, ok := current[path[0]].(map[string]any)
		if !ok {
			return
		}
		d, _ := defaults[path[0]].(map[string]any) // a nil map reads as empty
		current, defaults, path = c, d, path[1:]
	}
	if v, ok := defaults[path[0]]; ok {
		current[path[0]] = v
	} else {
		delete(current, path[0])
	}
}

func toJSONMap(v any) (map[string]any, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// dedupe drops repeated warnings, keeping the first of each.
func dedupe(errs field.ErrorList) field.ErrorList {
	var out field.ErrorList
	seen := map[string]bool{}
	for _, e := range errs {
		if k := e.Error(); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return slices.Clip(out)
}
