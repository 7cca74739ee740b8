package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	_ "k8s.io/kubernetes/pkg/features" // every Kubernetes gate, as kube-proxy's binary registers them
)

// Gate is one feature gate kube-proxy knows, as written to
// kube-proxy-feature-gates.json.
type Gate struct {
	Name          string `json:"name"`
	Default       bool   `json:"default"`
	LockToDefault bool   `json:"lockToDefault,omitempty"`
	PreRelease    string `json:"preRelease"`
	// Dependencies are the gates this one needs enabled when it is.
	Dependencies []string `json:"dependencies,omitempty"`
}

// kubeProxyGates returns the feature gates kube-proxy's --feature-gates and
// featureGates accept (its process-wide gate, with the command set up as
// kube-proxy's main sets it up), at its own version, as JSON.
func kubeProxyGates() ([]byte, error) {
	if _, err := kubeProxyFlags(); err != nil { // registers what NewProxyCommand's packages add
		return nil, err
	}
	all := utilfeature.DefaultMutableFeatureGate.GetAll()
	deps := utilfeature.DefaultMutableFeatureGate.Dependencies()
	var gates []Gate
	for _, name := range slices.Sorted(maps.Keys(all)) {
		spec := all[name]
		g := Gate{Name: string(name), Default: spec.Default, LockToDefault: spec.LockToDefault, PreRelease: string(spec.PreRelease)}
		for _, d := range deps[name] {
			g.Dependencies = append(g.Dependencies, string(d))
		}
		slices.Sort(g.Dependencies)
		gates = append(gates, g)
	}
	if len(gates) < 100 {
		return nil, fmt.Errorf("only %d feature gates: the Kubernetes ones are missing", len(gates))
	}
	data, err := json.MarshalIndent(struct {
		Kubernetes string `json:"kubernetes"`
		Gates      []Gate `json:"gates"`
	}{kubernetesVersion(), gates}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
