package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/version"
)

// versionLDFlags are the -ldflags that stamp a kpng binary's version, as
// Kubernetes' build stamps kube-proxy's (hack/lib/version.sh): component-base's
// version package (--version, kubernetes_build_info) and client-go's (the
// User-Agent).
func versionLDFlags(gitVersion, major, minor, commit string) string {
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range []string{"gitVersion=" + gitVersion, "gitMajor=" + major, "gitMinor=" + minor, "gitCommit=" + commit,
			"gitTreeState=clean", "buildDate=2026-01-02T03:04:05Z"} {
			flags = append(flags, "-X "+pkg+"."+kv)
		}
	}
	return strings.Join(flags, " ")
}

// TestVersion builds kpng stamped as a release is, and checks --version and
// --version=raw on every command line kube-proxy's users type it on: bare
// kpng, kpng proxy, and any pipeline.
func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kpng")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-ldflags", versionLDFlags("v0.7.1", "0", "7", "0123abcd"), "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--version"}, []string{"kpng v0.7.1\n"}},
		{[]string{"proxy", "--version"}, []string{"kpng v0.7.1\n"}},
		{[]string{"proxy", "--version=true"}, []string{"kpng v0.7.1\n"}},
		{[]string{"file", "--input", "x", "to-file", "--version"}, []string{"kpng v0.7.1\n"}},
		{[]string{"--version=raw"}, []string{`version.Info{Major:"0", Minor:"7", `, `GitVersion:"v0.7.1", GitCommit:"0123abcd", GitTreeState:"clean", BuildDate:"2026-01-02T03:04:05Z"`}},
	} {
		out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
		if err != nil {
			t.Errorf("kpng %q: %v\n%s", tc.args, err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) || len(tc.want) == 1 && string(out) != w {
				t.Errorf("kpng %q printed %q, want %q", tc.args, out, w)
			}
		}
	}
	out, err := exec.CommandContext(ctx, bin, "--version=nope").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "version") {
		t.Errorf("kpng --version=nope: %v, want an error naming the flag\n%s", err, out)
	}
}

// TestBuildInfoMetric: kubernetes_build_info is registered, as kube-proxy
// registers it, with this binary's version.
func TestBuildInfoMetric(t *testing.T) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "kubernetes_build_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "git_version" && l.GetValue() == version.Get().GitVersion && m.GetGauge().GetValue() == 1 {
					return
				}
			}
		}
		t.Fatalf("kubernetes_build_info has no series with git_version %q: %v", version.Get().GitVersion, mf)
	}
	t.Fatal("kubernetes_build_info is not registered")
}
