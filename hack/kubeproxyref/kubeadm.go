package main

import (
	"bytes"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	kubeadmscheme "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme"
	kubeadmapiv1 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	"k8s.io/kubernetes/cmd/kubeadm/app/componentconfigs"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
	"k8s.io/kubernetes/cmd/kubeadm/app/phases/addons/proxy"
)

// kubeadmVariants are the kubeadm clusters whose kube-proxy configuration is
// written: kubeadm init's defaults, and with --pod-network-cidr (which
// becomes clusterCIDR).
var kubeadmVariants = []struct {
	path      string
	podSubnet string
}{
	{path: "config/testdata/v1alpha1/kubeadm-1.36-default.yaml"},
	{path: "config/testdata/v1alpha1/kubeadm-1.36-pod-subnet.yaml", podSubnet: "10.244.0.0/16"},
}

// kubeadmProxyConfig returns the config.conf key of the kube-proxy
// ConfigMap that kubeadm init creates, rendered by kubeadm's own addon
// phase (as `kubeadm init phase addon kube-proxy --print-manifest` prints
// it) from kubeadm's defaults, with podSubnet as the cluster's pod subnet.
func kubeadmProxyConfig(podSubnet string) ([]byte, error) {
	initCfg := &kubeadmapiv1.InitConfiguration{
		LocalAPIEndpoint: kubeadmapiv1.APIEndpoint{AdvertiseAddress: "192.0.2.10"},
		NodeRegistration: kubeadmapiv1.NodeRegistrationOptions{CRISocket: kubeadmconstants.DefaultCRISocket, Name: "node"},
	}
	clusterCfg := &kubeadmapiv1.ClusterConfiguration{
		KubernetesVersion: kubeadmconstants.CurrentKubernetesVersion.String(),
		Networking:        kubeadmapiv1.Networking{PodSubnet: podSubnet},
	}
	internal := &kubeadmapi.InitConfiguration{}
	kubeadmscheme.Scheme.Default(initCfg)
	if err := kubeadmscheme.Scheme.Convert(initCfg, internal, nil); err != nil {
		return nil, err
	}
	kubeadmscheme.Scheme.Default(clusterCfg)
	if err := kubeadmscheme.Scheme.Convert(clusterCfg, &internal.ClusterConfiguration, nil); err != nil {
		return nil, err
	}
	componentconfigs.Default(&internal.ClusterConfiguration, &internal.LocalAPIEndpoint, &internal.NodeRegistration)

	var manifests bytes.Buffer
	if err := proxy.EnsureProxyAddon(&internal.ClusterConfiguration, &internal.LocalAPIEndpoint, nil, &manifests, true); err != nil {
		return nil, err
	}
	for _, doc := range bytes.Split(manifests.Bytes(), []byte("\n---")) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(doc, &cm); err != nil || cm.Kind != "ConfigMap" || cm.Name != kubeadmconstants.KubeProxyConfigMap {
			continue
		}
		conf, ok := cm.Data[kubeadmconstants.KubeProxyConfigMapKey]
		if !ok {
			return nil, fmt.Errorf("ConfigMap %s has no key %s", cm.Name, kubeadmconstants.KubeProxyConfigMapKey)
		}
		return []byte(conf + "\n"), nil
	}
	return nil, fmt.Errorf("no ConfigMap %s among kubeadm's manifests:\n%s", kubeadmconstants.KubeProxyConfigMap, manifests.String())
}
