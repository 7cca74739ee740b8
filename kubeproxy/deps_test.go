package kubeproxy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoDependencyOnKubernetesItself: a program built on this package
// (examples/custom-proxy) depends on k8s.io/api, apimachinery, client-go,
// component-base and kube-proxy's staging module, never on the Kubernetes
// monorepo (ARCHITECTURE.md, contract 6), nor on any backend: the
// program chooses those.
func TestNoDependencyOnKubernetesItself(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./kubeproxy")
	cmd.Dir = ".." // the module's root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./kubeproxy: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 || !strings.Contains(string(out), "k8s.io/client-go/rest\n") {
		t.Fatalf("go list printed %d packages, without client-go: not what this test reads", len(deps))
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "k8s.io/kubernetes/") || strings.HasPrefix(p, "github.com/kpng/kpng/backends/") {
			t.Errorf("kubeproxy depends on %s", p)
		}
	}
}
