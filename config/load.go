package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	kpv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"

	"github.com/kpng/kpng/config/v1alpha1"
	"github.com/kpng/kpng/config/v1alpha2"
)

// Loaded is a configuration file read by Load.
type Loaded struct {
	// Config is the defaulted, converted configuration. It is not validated:
	// apply command-line flags first, then call Check.
	Config *KubeProxyConfiguration
	// APIVersion is the apiVersion the file was written in.
	APIVersion string
	// Set holds the fields the file set explicitly (to a non-null value),
	// as v1alpha2 paths, whatever version the file was written in.
	Set FieldSet
	// Warnings describes what was accepted but not used: dropped v1alpha1
	// fields, and strictness errors tolerated because the file says
	// configHardFail: false.
	Warnings []string
}

// Load decodes a KubeProxyConfiguration written as YAML or JSON in either
// kubeproxy.config.k8s.io/v1alpha1 or v1alpha2 (chosen by apiVersion; kind
// must be KubeProxyConfiguration), applies that version's defaults and
// converts it to the hub.
//
// Decoding is strict: unknown fields, duplicate fields (in YAML or JSON) and
// fields spelled with the wrong case are errors that name the field. The one
// exception is a v1alpha2 file that sets configHardFail: false, which asks
// for warnings instead; Load then decodes leniently and reports what it
// ignored in Warnings.
func Load(data []byte) (*Loaded, error) {
	var problems []string // strictness violations, fatal unless configHardFail is false

	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		problems = append(problems, err.Error())
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return nil, fmt.Errorf("decoding configuration: %w", err)
		}
	}

	var raw map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &raw); err != nil {
		return nil, fmt.Errorf("decoding configuration: must be an object: %w", err)
	}
	if raw == nil {
		return nil, errors.New("decoding configuration: document is empty")
	}
	apiVersion, _ := raw["apiVersion"].(string)
	kind, _ := raw["kind"].(string)
	if kind != v1alpha2.Kind {
		return nil, fmt.Errorf("decoding configuration: kind: got %q, want %q", kind, v1alpha2.Kind)
	}

	switch apiVersion {
	case v1alpha1.APIVersion:
		var obj kpv1alpha1.KubeProxyConfiguration
		strict, err := decodeStrict(js, &obj)
		if err != nil {
			return nil, err
		}
		if problems = append(problems, strict...); len(problems) > 0 {
			// v1alpha1 has no configHardFail: strictness errors are fatal.
			return nil, strictError(problems)
		}
		cfg, warnings, err := FromV1Alpha1(&obj)
		if err != nil {
			return nil, err
		}
		return &Loaded{Config: cfg, APIVersion: apiVersion, Set: setFromV1Alpha1(raw, ProxyMode(obj.Mode)), Warnings: warnings}, nil

	case v1alpha2.APIVersion:
		var obj v1alpha2.KubeProxyConfiguration
		strict, err := decodeStrict(js, &obj)
		if err != nil {
			return nil, err
		}
		problems = append(problems, strict...)
		var warnings []string
		if len(problems) > 0 {
			if obj.ConfigHardFail == nil || *obj.ConfigHardFail {
				return nil, strictError(problems)
			}
			for _, p := range problems {
				warnings = append(warnings, "ignored (configHardFail is false): "+p)
			}
		}
		return &Loaded{Config: FromV1Alpha2(&obj), APIVersion: apiVersion, Set: setFromRaw(raw), Warnings: warnings}, nil

	default:
		return nil, fmt.Errorf("decoding configuration: apiVersion: got %q, want %q or %q", apiVersion, v1alpha1.APIVersion, v1alpha2.APIVersion)
	}
}

// decodeStrict decodes js into obj case-sensitively. It returns the
// strictness violations (unknown and duplicate fields, each naming its field
// path) separately from hard errors (malformed JSON, wrong value types).
func decodeStrict(js []byte, obj any) ([]string, error) {
	strictErrs, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("decoding configuration: %w", err)
	}
	problems := make([]string, 0, len(strictErrs))
	for _, e := range strictErrs {
		problems = append(problems, e.Error())
	}
	return problems, nil
}

// strictError joins strictness violations into one error.
func strictError(problems []string) error {
	slices.Sort(problems)
	return fmt.Errorf("decoding configuration (strict): %s", strings.Join(problems, "; "))
}
