//go:build tools

// Package tools records the Kubernetes commands that kpng's test tooling
// builds, so that `go mod tidy` keeps every module they need.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
