package backend

import (
	"os/exec"
	"strings"
	"testing"
)

// goList runs `go list -deps` from the module's root and returns, for each
// package it lists, whether it is in the standard library.
func goList(t *testing.T, patterns ...string) map[string]bool {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".." // the module's root
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	pkgs := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, std, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("go list printed %q", line)
		}
		pkgs[path] = std == "true"
	}
	return pkgs
}

// The contract (backend, and the gRPC client library built on it) depends
// on the view types and the standard library only: every package it pulls
// in is the standard library's, api/localv1's own closure (the protobuf and
// gRPC runtime of its generated code), or one named below with its reason.
// A backend author's module therefore pulls neither client-go's world nor
// kpng's brain, cluster store or sources.
func TestContractDependsOnTheViewTypesAndTheStandardLibraryOnly(t *testing.T) {
	const kpng = "github.com/kpng/kpng/"
	allowed := goList(t, "./api/localv1")
	_, proto := allowed["google.golang.org/protobuf/proto"]
	if !allowed["fmt"] || !proto {
		// The closure must hold the standard library and protobuf's runtime;
		// anything less means go list did not answer what this test reads.
		t.Fatalf("api/localv1's closure looks wrong: %d packages", len(allowed))
	}
	// The contract's own packages, and what client needs beyond localv1's
	// closure: its Watch session (client/internal/session), and
	// internal/tlsfiles, which reloads rotated certificates with the
	// standard library only. The cluster model (api/globalv1) is not
	// among them: its client is client/clusterwatch.
	for _, p := range []string{"backend", "client", "client/internal/session", "internal/tlsfiles"} {
		allowed[kpng+p] = true
	}
	deps := goList(t, "./backend", "./client")
	for _, p := range []string{"backend", "client", "api/localv1"} {
		if _, ok := deps[kpng+p]; !ok {
			t.Fatalf("go list -deps ./backend ./client lacks %s: %d packages", p, len(deps))
		}
	}
	forbidden := []string{"k8s.io/", kpng + "api/globalv1", kpng + "brain", kpng + "cluster", kpng + "source", kpng + "local", kpng + "server", kpng + "config", kpng + "proxyutil", "github.com/spf13/"}
	for p, std := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("the contract depends on %s", p)
			}
		}
		if _, ok := allowed[p]; !std && !ok {
			t.Errorf("the contract depends on %s, which is neither the standard library's nor in api/localv1's closure", p)
		}
	}
	// api/localv1's closure itself: protobuf and gRPC (its Watch service),
	// and what they use, but nothing of Kubernetes.
	for p := range allowed {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, kpng+"brain") || strings.HasPrefix(p, kpng+"cluster") {
			t.Errorf("api/localv1 depends on %s", p)
		}
	}
}
