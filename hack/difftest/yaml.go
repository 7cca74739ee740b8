package main

import (
	"bytes"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// YAML writes the cluster as `kpng file --input` reads it: one document
// per object, as `kubectl get -o yaml` prints them, after a comment of
// header lines.
func YAML(c *Cluster, header ...string) ([]byte, error) {
	var buf bytes.Buffer
	for _, h := range header {
		for _, line := range strings.Split(h, "\n") {
			fmt.Fprintf(&buf, "# %s\n", line)
		}
	}
	write := func(obj any) error {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(b)
		return nil
	}
	for _, n := range c.Nodes {
		if err := write(nodeYAML{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: n.ObjectMeta,
			Spec:       nodeSpecYAML{PodCIDRs: n.Spec.PodCIDRs},
			Status:     nodeStatusYAML{Addresses: n.Status.Addresses},
		}); err != nil {
			return nil, err
		}
	}
	for _, s := range c.Services {
		s = s.DeepCopy()
		s.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		if err := write(s); err != nil {
			return nil, err
		}
	}
	for _, s := range c.Slices {
		s = s.DeepCopy()
		s.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
		if err := write(s); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// nodeYAML is the part of a Node that proxies read; corev1.Node would
// print every empty status field.
type nodeYAML struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              nodeSpecYAML   `json:"spec"`
	Status            nodeStatusYAML `json:"status"`
}

type nodeSpecYAML struct {
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

type nodeStatusYAML struct {
	Addresses []corev1.NodeAddress `json:"addresses,omitempty"`
}
