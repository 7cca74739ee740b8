//go:build integration

package apiserver

import (
	"path/filepath"
	"testing"
)

// The integration tests find kube-apiserver where hack/install-test-deps.sh
// puts it, and etcd, with no variable set: what CI relies on.
func TestFindBinariesWithoutOverrides(t *testing.T) {
	t.Setenv(EnvKubeAPIServer, "")
	t.Setenv(EnvEtcd, "")
	b, err := findBinaries()
	if err != nil {
		t.Fatal(err)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, ".cache", "bin", "kube-apiserver"); b.kubeAPIServer != want {
		t.Errorf("kube-apiserver found at %s, want %s", b.kubeAPIServer, want)
	}
	if b.etcd == "" {
		t.Error("no etcd found")
	}
}
