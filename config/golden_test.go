package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestMigrationGolden converts every real v1alpha1 fixture under
// testdata/v1alpha1 to v1alpha2 (what --write-config-to writes) and compares
// with testdata/golden/<name>.v1alpha2.yaml. Run with -update to regenerate
// after an intended change, and review the diff.
func TestMigrationGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/v1alpha1/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 3 {
		t.Fatalf("found %d fixtures, want at least kubeadm, kind and every-field", len(inputs))
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			loaded, err := Load(data)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if errs := ValidateFor(loaded.Config, "linux"); len(errs) > 0 {
				t.Errorf("real configuration does not validate: %v", errs)
			}
			got, err := Marshal(loaded.Config)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", name+".v1alpha2.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./config -run TestMigrationGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("migration of %s differs from %s (run with -update if intended):\n%s", in, golden, got)
			}

			// The written v1alpha2 loads back to the same configuration, and
			// (these fixtures keep inactive backends at their defaults) so
			// does the trip back to v1alpha1.
			again, err := Load(want)
			if err != nil {
				t.Fatalf("Load(golden): %v", err)
			}
			if !equality.Semantic.DeepEqual(again.Config, loaded.Config) {
				t.Errorf("golden v1alpha2 loads to a different configuration")
			}
			v1, err := MarshalV1Alpha1(again.Config)
			if err != nil {
				t.Fatalf("MarshalV1Alpha1: %v", err)
			}
			back, err := Load(v1)
			if err != nil {
				t.Fatalf("Load(v1alpha1): %v", err)
			}
			if !equality.Semantic.DeepEqual(back.Config, loaded.Config) {
				t.Errorf("v1alpha1 -> v1alpha2 -> v1alpha1 changed the configuration:\n%s", v1)
			}
		})
	}
}
