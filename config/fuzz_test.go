package config

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzLoad feeds arbitrary documents to Load. Whatever the input, nothing
// panics; and anything that loads also validates, checks, marshals as
// v1alpha2 and re-loads to an equal configuration (and, when v1alpha1 can
// express it, does the same through v1alpha1). The committed seed corpus is
// under testdata/fuzz/FuzzLoad; the fixtures are added too.
//
//	go test ./config -run '^$' -fuzz FuzzLoad -fuzztime 1m
func FuzzLoad(f *testing.F) {
	for _, pattern := range []string{"testdata/v1alpha1/*.yaml", "testdata/golden/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		loaded, err := Load(data)
		if err != nil {
			return
		}
		_ = Validate(loaded.Config)
		_, _, _ = Check(loaded.Config)

		out, err := Marshal(loaded.Config)
		if err != nil {
			t.Fatalf("loaded but does not marshal: %v", err)
		}
		again, err := Load(out)
		if err != nil {
			t.Fatalf("marshalled v1alpha2 does not re-load: %v\n%s", err, out)
		}
		if !equality.Semantic.DeepEqual(again.Config, loaded.Config) {
			t.Fatalf("re-loaded configuration differs:\n%#v\n%#v\n%s", loaded.Config, again.Config, out)
		}

		v1, err := MarshalV1Alpha1(loaded.Config)
		if err != nil {
			return // v1alpha1 cannot express it; the error names why
		}
		back, err := Load(v1)
		if err != nil {
			t.Fatalf("marshalled v1alpha1 does not re-load: %v\n%s", err, v1)
		}
		if !equality.Semantic.DeepEqual(back.Config, loaded.Config) {
			t.Fatalf("v1alpha1 round trip differs:\n%#v\n%#v\n%s", loaded.Config, back.Config, v1)
		}
	})
}
