package config

import (
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/kpng/kpng/config/v1alpha1"
	"github.com/kpng/kpng/config/v1alpha2"
)

// Marshal writes cfg as a kubeproxy.config.k8s.io/v1alpha2 YAML document with
// every field explicit, as --write-config-to does: the latest version,
// whatever version was read. Loading the result gives back cfg.
func Marshal(cfg *KubeProxyConfiguration) ([]byte, error) {
	out, err := yaml.Marshal(ToV1Alpha2(cfg))
	if err != nil {
		return nil, fmt.Errorf("encoding configuration as v1alpha2: %w", err)
	}
	return out, nil
}

// MarshalV1Alpha1 writes cfg as kube-proxy's kubeproxy.config.k8s.io/v1alpha1
// YAML, for handing a configuration back to kube-proxy. It fails, naming the
// fields, when cfg uses what v1alpha1 cannot express (see ToV1Alpha1).
func MarshalV1Alpha1(cfg *KubeProxyConfiguration) ([]byte, error) {
	obj, err := ToV1Alpha1(cfg)
	if err != nil {
		return nil, err
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding configuration as v1alpha1: %w", err)
	}
	return out, nil
}

// Default returns the v1alpha2 default configuration: what Load returns for a
// v1alpha2 file that sets nothing.
func Default() *KubeProxyConfiguration {
	return FromV1Alpha2(&v1alpha2.KubeProxyConfiguration{})
}

// DefaultV1Alpha1 returns kube-proxy's default configuration: what Load
// returns for a v1alpha1 file that sets nothing, which is what kube-proxy
// runs with when it is given flags and no --config.
func DefaultV1Alpha1() (*KubeProxyConfiguration, error) {
	l, err := Load([]byte("apiVersion: " + v1alpha1.APIVersion + "\nkind: " + v1alpha2.Kind + "\n"))
	if err != nil {
		return nil, fmt.Errorf("v1alpha1's defaults: %w", err)
	}
	return l.Config, nil
}
