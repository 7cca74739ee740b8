package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSinkFeatureGates: to-file (and to-local) take kube-proxy's
// --feature-gates, so that a hack/difftest report with
// AllowServiceExternalIPs=false replays with `kpng file`; an unknown gate
// is refused as kpng proxy refuses it.
func TestSinkFeatureGates(t *testing.T) {
	view := func(gates ...string) (string, error) {
		out := filepath.Join(t.TempDir(), "view.yaml")
		args := append([]string{"file", "--input", "../../examples/cluster.yaml", "to-file", "--node-name", "node-1", "--output", out}, gates...)
		if err := execute(context.Background(), t, args...); err != nil {
			return "", err
		}
		b, err := os.ReadFile(out)
		return string(b), err
	}
	on, err := view()
	if err != nil {
		t.Fatal(err)
	}
	off, err := view("--feature-gates", "AllowServiceExternalIPs=false")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(on, "192.0.2.50") || strings.Contains(off, "192.0.2.50") {
		t.Errorf("external IP 192.0.2.50 in the view: gate on %t, off %t; want true, false",
			strings.Contains(on, "192.0.2.50"), strings.Contains(off, "192.0.2.50"))
	}
	if _, err := view("--feature-gates", "NoSuchGate=true"); err == nil || !strings.Contains(err.Error(), "unrecognized feature gate: NoSuchGate") {
		t.Errorf("unknown gate: %v", err)
	}
	for _, cmd := range []string{"to-file", "to-local"} {
		if err := execute(context.Background(), t, "file", "--input", "x", cmd, "--feature-gates", "bad"); err == nil || !strings.Contains(err.Error(), "feature-gates") {
			t.Errorf("%s --feature-gates bad: %v", cmd, err)
		}
	}
}
