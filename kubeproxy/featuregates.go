package kubeproxy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kpng/kpng/brain"
)

// kubeProxyGatesJSON is every feature gate kube-proxy 1.36 accepts, with
// its default, lock, stage and dependencies, written by hack/kubeproxyref
// from kube-proxy's own gate.
//
//go:embed kube-proxy-feature-gates.json
var kubeProxyGatesJSON []byte

// kubeProxyGate is one entry of kube-proxy-feature-gates.json.
type kubeProxyGate struct {
	Name          string   `json:"name"`
	Default       bool     `json:"default"`
	LockToDefault bool     `json:"lockToDefault"`
	PreRelease    string   `json:"preRelease"`
	Dependencies  []string `json:"dependencies"`
}

// Gates kube-proxy 1.36 reads in a decision that kpng's brain makes.
const (
	// gateExternalIPs off: no rules for spec.externalIPs (settable).
	gateExternalIPs = "AllowServiceExternalIPs"
	// gateSameNode: node hints (PreferSameNode); locked on in 1.36, and
	// the brain always reads node hints.
	gateSameNode = "PreferSameTrafficDistribution"
	// gateServiceCIDRs: ServiceCIDRs are watched; locked on in 1.36, and
	// the kube source always watches them.
	gateServiceCIDRs = "MultiCIDRServiceAllocator"
)

// kubeProxyFeatureGate returns a feature gate that knows kube-proxy 1.36's
// gates exactly as its own does (defaults, locks, stages, dependencies),
// with gates set on it: an unknown gate, a locked gate set against its
// lock, or a gate enabled without the gates it depends on is the error
// kube-proxy's SetFromMap returns, and kube-proxy exits on it whatever
// configHardFail says.
func kubeProxyFeatureGate(gates map[string]bool) (featuregate.FeatureGate, error) {
	var known struct {
		Gates []kubeProxyGate `json:"gates"`
	}
	if err := json.Unmarshal(kubeProxyGatesJSON, &known); err != nil {
		return nil, fmt.Errorf("kube-proxy's feature gates: %w", err)
	}
	gate := featuregate.NewFeatureGate()
	builtin := gate.GetAll() // AllAlpha, AllBeta
	specs := map[featuregate.Feature]featuregate.FeatureSpec{}
	deps := map[featuregate.Feature][]featuregate.Feature{}
	for _, g := range known.Gates {
		name := featuregate.Feature(g.Name)
		if _, ok := builtin[name]; ok {
			continue
		}
		spec := featuregate.FeatureSpec{Default: g.Default, LockToDefault: g.LockToDefault}
		switch g.PreRelease {
		case string(featuregate.Alpha):
			spec.PreRelease = featuregate.Alpha
		case string(featuregate.Beta):
			spec.PreRelease = featuregate.Beta
		case string(featuregate.GA):
			spec.PreRelease = featuregate.GA
		case string(featuregate.Deprecated):
			spec.PreRelease = featuregate.Deprecated
		default:
			return nil, fmt.Errorf("kube-proxy's feature gate %s: unknown stage %q", g.Name, g.PreRelease)
		}
		specs[name] = spec
		for _, d := range g.Dependencies {
			deps[name] = append(deps[name], featuregate.Feature(d))
		}
	}
	if err := gate.Add(specs); err != nil {
		return nil, fmt.Errorf("kube-proxy's feature gates: %w", err)
	}
	if err := gate.AddDependencies(deps); err != nil {
		return nil, fmt.Errorf("kube-proxy's feature gates: %w", err)
	}
	if err := gate.SetFromMap(gates); err != nil {
		return nil, fmt.Errorf("featureGates: %w (as kube-proxy 1.36)", err)
	}
	return gate, nil
}

// kpngActsOn reports whether kpng acts on a gate: the brain's decision
// gates, component-base's logging gates, and the z-pages' gates.
func kpngActsOn() (func(string) bool, error) {
	logging := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(logging); err != nil {
		return nil, err
	}
	acts := map[string]bool{
		gateExternalIPs: true, gateSameNode: true, gateServiceCIDRs: true,
		"ComponentFlagz": true, "ComponentStatusz": true,
	}
	for name := range logging.GetAll() {
		acts[string(name)] = true
	}
	return func(name string) bool { return acts[name] }, nil
}

// CheckFeatureGates parses gates as kube-proxy 1.36 does, and
// returns one warning naming the gates kpng accepts but does not act on,
// set to other than their default (kpng behaves as kube-proxy 1.36 with
// them at their default), or "" when there are none.
func CheckFeatureGates(gates map[string]bool) (warning string, err error) {
	gate, err := kubeProxyFeatureGate(gates)
	if err != nil {
		return "", err
	}
	acts, err := kpngActsOn()
	if err != nil {
		return "", err
	}
	all := gate.(featuregate.MutableFeatureGate).GetAll()
	var ignored []string
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		if on := gates[name]; !acts(name) && on != all[featuregate.Feature(name)].Default {
			ignored = append(ignored, fmt.Sprintf("%s=%t", name, on))
		}
	}
	if len(ignored) == 0 {
		return "", nil
	}
	return fmt.Sprintf("featureGates %s accepted, as kube-proxy 1.36 accepts them, but have no effect in kpng, which behaves as kube-proxy with them at their defaults",
		strings.Join(ignored, ", ")), nil
}

// GateBrainOptions sets the brain options that feature gates decide.
// gates were checked (CheckFeatureGates).
func GateBrainOptions(gates map[string]bool, opts *brain.Options) error {
	gate, err := kubeProxyFeatureGate(gates)
	if err != nil {
		return err
	}
	opts.ExternalIPsDisabled = !gate.Enabled(gateExternalIPs)
	return nil
}

// joinProblems is how several problems read in one error.
func joinProblems(problems []string) string { return strings.Join(problems, "; ") }
