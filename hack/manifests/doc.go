// Package manifests holds the test of deploy/'s kustomize bases: see
// manifests_test.go.
package manifests
