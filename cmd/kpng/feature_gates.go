package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// kubeProxyGatesJSON is every feature gate kube-proxy 1.36 accepts, with
// its default, written by hack/kubeproxyref from kube-proxy's own gate.
//
//go:embed kube-proxy-feature-gates.json
var kubeProxyGatesJSON []byte

// kubeProxyGate is one entry of kube-proxy-feature-gates.json.
type kubeProxyGate struct {
	Name          string `json:"name"`
	Default       bool   `json:"default"`
	LockToDefault bool   `json:"lockToDefault"`
}

// kpngReadsGate says whether kpng acts on a gate: component-base's logging
// gates, and the z-pages' ones (ComponentFlagz, ComponentStatusz).
func kpngReadsGate() (func(string) bool, error) {
	logging := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(logging); err != nil {
		return nil, err
	}
	read := map[string]bool{"ComponentFlagz": true, "ComponentStatusz": true}
	for name := range logging.GetAll() {
		read[string(name)] = true
	}
	return func(name string) bool { return read[name] }, nil
}

// checkFeatureGates judges featureGates as kube-proxy 1.36 does: a gate it
// does not know, or a locked gate set against its lock, is a problem (an
// error in kube-proxy). A known gate that kpng does not act on, set to
// other than its default, is a warning: kpng behaves as kube-proxy 1.36
// with that gate at its default.
func checkFeatureGates(gates map[string]bool) (warnings, problems []string, err error) {
	var known struct {
		Gates []kubeProxyGate `json:"gates"`
	}
	if err := json.Unmarshal(kubeProxyGatesJSON, &known); err != nil {
		return nil, nil, fmt.Errorf("kube-proxy's feature gates: %w", err)
	}
	reads, err := kpngReadsGate()
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]kubeProxyGate{}
	for _, g := range known.Gates {
		byName[g.Name] = g
	}
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		on := gates[name]
		g, ok := byName[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("featureGates: unrecognized feature gate: %s (kube-proxy 1.36 refuses it too)", name))
		case g.LockToDefault && on != g.Default:
			problems = append(problems, fmt.Sprintf("featureGates: cannot set feature gate %s to %t, feature is locked to %t (as in kube-proxy 1.36)", name, on, g.Default))
		case reads(name), on == g.Default:
		default:
			warnings = append(warnings, fmt.Sprintf("featureGates.%s=%t has no effect in kpng, which behaves as kube-proxy 1.36 with %s at its default (%t)", name, on, name, g.Default))
		}
	}
	return warnings, problems, nil
}

// joinProblems is how several problems read in one error.
func joinProblems(problems []string) string { return strings.Join(problems, "; ") }
