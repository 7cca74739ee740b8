package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFilesAreCurrent fails when a file this command writes differs from
// what the pinned Kubernetes code gives: run `go run .` in hack/kubeproxyref.
func TestFilesAreCurrent(t *testing.T) {
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join("../..", f.path))
		if err != nil {
			t.Errorf("%s: %v (run `go run .` in hack/kubeproxyref)", f.path, err)
			continue
		}
		if string(got) != string(f.data) {
			t.Errorf("%s is not what Kubernetes %s gives (run `go run .` in hack/kubeproxyref); want:\n%s", f.path, kubernetesVersion(), f.data)
		}
	}
}

// TestKubeadmConfigIsComplete guards the generator itself: kubeadm's file
// is kube-proxy's v1alpha1 with every field written out, null included.
func TestKubeadmConfigIsComplete(t *testing.T) {
	data, err := kubeadmProxyConfig("10.244.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"apiVersion: kubeproxy.config.k8s.io/v1alpha1",
		"kind: KubeProxyConfiguration",
		"bindAddress: 0.0.0.0",
		"clusterCIDR: 10.244.0.0/16",
		"kubeconfig: /var/lib/kube-proxy/kubeconfig.conf",
		"nodePortAddresses: null",
		`showHiddenMetricsForVersion: ""`,
		"winkernel:",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("kubeadm's config.conf lacks %q:\n%s", want, data)
		}
	}
}

// TestFlagsMatchTheBinary compares the flags written with those that the
// kube-proxy binary the tests run (hack/install-test-deps.sh builds it from
// the same module) lists in its --help, so that what kube-proxy's main adds
// around NewProxyCommand is not missed.
func TestFlagsMatchTheBinary(t *testing.T) {
	bin := filepath.Join("../../.cache/bin/kube-proxy")
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v (hack/install-test-deps.sh builds it)\n%s", bin, err, out)
	}
	re := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)
	var inHelp []string
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		inHelp = append(inHelp, m[1])
	}
	data, err := kubeProxyFlags()
	if err != nil {
		t.Fatal(err)
	}
	var flags Flags
	if err := json.Unmarshal(data, &flags); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, f := range flags.Flags {
		if f.Deprecated == "" && !f.Hidden { // --help leaves those out
			listed = append(listed, f.Name)
		}
	}
	slices.Sort(inHelp)
	if !slices.Equal(inHelp, listed) {
		t.Errorf("kube-proxy --help lists\n  %v\nthe generator finds\n  %v", inHelp, listed)
	}
}

// TestSameKubernetesAsTools keeps this module on the Kubernetes version that
// hack/tools builds the test binaries from.
func TestSameKubernetesAsTools(t *testing.T) {
	data, err := os.ReadFile("../tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("hack/tools/go.mod requires no k8s.io/kubernetes")
	}
	if got := kubernetesVersion(); got != string(m[1]) {
		t.Errorf("hack/kubeproxyref builds with k8s.io/kubernetes %s, hack/tools with %s: update this module's go.mod and run `go run .`", got, m[1])
	}
}
