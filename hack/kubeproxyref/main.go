// Command kubeproxyref writes what kpng's drop-in tests compare with, taken
// from upstream Kubernetes' own code at the version hack/tools pins (the
// kube-proxy binary the tests run is built from the same module):
//
//   - kubeproxy/testdata/kube-proxy-flags.json: every flag of kube-proxy's
//     command line, as kube-proxy registers them (app.NewProxyCommand, plus
//     what component-base/cli.Run and cobra add when the command runs:
//     logging flags, --version, the word-separator normalizer);
//   - kubeproxy/kube-proxy-feature-gates.json: the feature gates kube-proxy
//     accepts, with their defaults, which kpng embeds to judge featureGates
//     as kube-proxy does;
//   - config/testdata/v1alpha1/kubeadm-*.yaml: the config.conf of the
//     kube-proxy ConfigMap that kubeadm writes, exactly as kubeadm's addon
//     phase renders it, for kubeadm's defaults and for a pod subnet.
//
// Run it from this folder to refresh the files after changing the pinned
// Kubernetes version:
//
//	go run .
//
// and `go test .` checks that the files are current.
//
// It is a module of its own because it imports k8s.io/kubernetes, which the
// kpng module must never depend on (ARCHITECTURE.md, contract 6).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	root := flag.String("root", "../..", "the kpng repository's root")
	flag.Parse()
	files, err := generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeproxyref:", err)
		os.Exit(1)
	}
	for _, f := range files {
		path := filepath.Join(*root, f.path)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "kubeproxyref:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}

// file is a generated file, by its path from the repository's root.
type file struct {
	path string
	data []byte
}

// generate returns every file this command writes.
func generate() ([]file, error) {
	flags, err := kubeProxyFlags()
	if err != nil {
		return nil, fmt.Errorf("kube-proxy's flags: %w", err)
	}
	gates, err := kubeProxyGates()
	if err != nil {
		return nil, fmt.Errorf("kube-proxy's feature gates: %w", err)
	}
	files := []file{
		{path: "kubeproxy/testdata/kube-proxy-flags.json", data: flags},
		{path: "kubeproxy/kube-proxy-feature-gates.json", data: gates},
	}
	for _, v := range kubeadmVariants {
		data, err := kubeadmProxyConfig(v.podSubnet)
		if err != nil {
			return nil, fmt.Errorf("kubeadm's kube-proxy ConfigMap (%s): %w", v.path, err)
		}
		files = append(files, file{path: v.path, data: data})
	}
	return files, nil
}
