package kubeproxy

import (
	"testing"

	"github.com/kpng/kpng/config"
)

// TestZpageGates: /flagz and /statusz follow kube-proxy 1.36's beta gates,
// on unless the configuration turns them off.
func TestZpageGates(t *testing.T) {
	c := config.Default()
	if !gateEnabled(c, "ComponentFlagz") || !gateEnabled(c, "ComponentStatusz") {
		t.Error("the z-page gates are off by default; kube-proxy 1.36 has them on")
	}
	c.FeatureGates = map[string]bool{"ComponentFlagz": false, "ComponentStatusz": true}
	if gateEnabled(c, "ComponentFlagz") || !gateEnabled(c, "ComponentStatusz") {
		t.Errorf("gates %v not followed", c.FeatureGates)
	}
}
