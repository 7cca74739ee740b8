package config

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	v1alpha1Header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	v1alpha2Header = "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n"
)

// mustLoad loads a document and fails the test on error.
func mustLoad(t *testing.T, doc string) *Loaded {
	t.Helper()
	l, err := Load([]byte(doc))
	if err != nil {
		t.Fatalf("Load: %v\n%s", err, doc)
	}
	return l
}

// yamlMap decodes a YAML document to generic JSON values.
func yamlMap(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("YAMLToJSON: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatalf("json: %v", err)
	}
	return m
}

// lookup returns the value at a dotted path and whether it exists.
func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// jsonValue normalizes a Go value to what encoding/json decodes it to.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(js, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
