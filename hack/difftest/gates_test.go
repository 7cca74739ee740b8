package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// decisionGates are the feature gates kube-proxy 1.36 reads in its
// service decisions (pkg/proxy, cmd/kube-proxy/app), and what kpng does
// about each: difftest covers AllowServiceExternalIPs on and off; the
// others are locked on in 1.36, as kpng behaves.
var decisionGates = []string{"AllowServiceExternalIPs", "MultiCIDRServiceAllocator", "PreferSameTrafficDistribution"}

// TestKubeProxyReadsNoOtherGate reads kube-proxy's own source at the pinned
// version: a gate it starts to read in a decision (after a Kubernetes
// update) fails here until the brain and difftest follow it.
func TestKubeProxyReadsNoOtherGate(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root := strings.TrimSpace(string(out))
	gateRef := regexp.MustCompile(`\bfeatures\.([A-Z]\w+)`)
	var found []string
	for _, dir := range []string{"pkg/proxy", "pkg/proxy/nftables", "pkg/proxy/iptables", "pkg/proxy/config", "pkg/proxy/util", "pkg/proxy/healthcheck", "cmd/kube-proxy/app"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.Contains(f, "windows") || strings.Contains(f, "_other") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range gateRef.FindAllStringSubmatch(string(src), -1) {
				found = append(found, m[1])
			}
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	if !slices.Equal(found, decisionGates) {
		t.Errorf("kube-proxy's decisions read the gates %v; difftest and the brain know %v", found, decisionGates)
	}
}

// TestSamePinnedKubernetes: difftest compares with the kube-proxy that
// hack/tools builds the test API server (and the e2e kube-proxy) from.
func TestSamePinnedKubernetes(t *testing.T) {
	tools, err := os.ReadFile("../tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)`)
	want := pin.FindStringSubmatch(string(tools))
	if want == nil {
		t.Fatal("hack/tools/go.mod pins no k8s.io/kubernetes")
	}
	own, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	got := pin.FindStringSubmatch(string(own))
	if got == nil || got[1] != want[1] {
		t.Errorf("hack/difftest uses k8s.io/kubernetes %v, hack/tools pins %s: update this module's requires and replaces", got, want[1])
	}
}
