package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

// Load is LoadWith without command-line overrides: the file's own mode
// selects the v1alpha1 per-mode sections.
func Load(data []byte) (*Loaded, error) {
	return LoadWith(data, LoadOptions{})
}

// LoadOptions are the command-line settings that change how a file is read,
// because they must be settled before it is converted.
type LoadOptions struct {
	// Mode, when not nil, is the proxy mode given on the command line
	// (--proxy-mode, even empty), which overrides the file's. It matters for
	// v1alpha1: the effective mode picks which per-mode section (iptables,
	// ipvs or nftables) gives syncPeriod, minSyncPeriod and masqueradeAll,
	// as kube-proxy picks them by the mode it runs in. The loaded
	// configuration has this mode, whatever the version.
	Mode *ProxyMode
}

// LoadWith decodes a KubeProxyConfiguration written as YAML or JSON in either
// kubeproxy.config.k8s.io/v1alpha1 or v1alpha2 (chosen by apiVersion; kind
// must be KubeProxyConfiguration), applies that version's defaults and
// converts it to the hub.
//
// Decoding is strict: unknown fields, duplicate fields (in YAML or JSON),
// fields spelled with the wrong case and values of the wrong type
// ("syncPeriod: abc", "maxPerCore: x") are errors that name the field by its
// path. There are two exceptions. A v1alpha1 file whose only faults are
// unknown or duplicate fields is read leniently, as kube-proxy reads it:
// unknown fields are dropped, the last of duplicates wins, and Warnings says
// so (a value of the wrong type stays fatal, as in kube-proxy). A v1alpha2
// file that sets configHardFail: false asks for warnings instead of errors;
// Load then decodes leniently (a value of the wrong type leaves its field at
// the default) and reports what it ignored in Warnings.
//
// A YAML file may hold several documents separated by "---" lines (a kubeadm
// configuration file, say): Load uses the one whose kind is
// KubeProxyConfiguration, and lists the others it skipped in Warnings. No such
// document, or more than one, is an error. (kube-proxy reads only the first
// document and silently drops the rest.)
//
// opts carries the command-line settings that must be known before the
// file is converted (see LoadOptions).
func LoadWith(data []byte, opts LoadOptions) (*Loaded, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	switch len(docs) {
	case 0:
		return nil, errors.New("decoding configuration: document is empty")
	case 1:
		return loadDocument(docs[0].data, opts)
	}
	var chosen []document
	var skipped []string
	for _, d := range docs {
		if d.kind == v1alpha2.Kind {
			chosen = append(chosen, d)
		} else {
			skipped = append(skipped, fmt.Sprintf("document %d (apiVersion %q, kind %q) is not a %s: skipped", d.index, d.apiVersion, d.kind, v1alpha2.Kind))
		}
	}
	switch len(chosen) {
	case 0:
		return nil, fmt.Errorf("decoding configuration: none of the %d documents has kind %s (%s)", len(docs), v1alpha2.Kind, strings.Join(skipped, "; "))
	case 1:
	default:
		indexes := make([]string, len(chosen))
		for i, d := range chosen {
			indexes[i] = fmt.Sprint(d.index)
		}
		return nil, fmt.Errorf("decoding configuration: documents %s are all of kind %s; a file holds at most one", strings.Join(indexes, ", "), v1alpha2.Kind)
	}
	loaded, err := loadDocument(chosen[0].data, opts)
	if err != nil {
		return nil, fmt.Errorf("document %d: %w", chosen[0].index, err)
	}
	loaded.Warnings = append(skipped, loaded.Warnings...)
	return loaded, nil
}

// document is one YAML document of a configuration file.
type document struct {
	index            int // 1-based, counting non-empty documents
	data             []byte
	apiVersion, kind string
}

// splitDocuments splits a YAML stream on its "---" separator lines, dropping
// documents that hold nothing (whitespace, comments, null), and reads the
// apiVersion and kind of each. A file that is one document is returned as is,
// so that JSON (which has no separators) and single YAML documents take the
// exact same path as before; a malformed extra document is an error naming it.
func splitDocuments(data []byte) ([]document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []document
	chunks := 0
	for {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("decoding configuration: splitting documents: %w", err)
		}
		chunks++
		js, err := yaml.YAMLToJSON(chunk)
		if err != nil {
			return nil, fmt.Errorf("decoding configuration: document %d: %w", len(docs)+1, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		var meta struct {
			APIVersion any `json:"apiVersion"`
			Kind       any `json:"kind"`
		}
		if err := json.Unmarshal(js, &meta); err != nil {
			// Not an object: as the only document, loadDocument names the
			// problem; among several, name it here.
			meta.Kind = nil
		}
		d := document{index: len(docs) + 1, data: chunk}
		d.apiVersion, _ = meta.APIVersion.(string)
		d.kind, _ = meta.Kind.(string)
		docs = append(docs, d)
	}
	if chunks == 1 && len(docs) == 1 {
		docs[0].data = data // keep line numbers as written
	}
	return docs, nil
}

// loadDocument is LoadWith for a single document.
func loadDocument(data []byte, opts LoadOptions) (*Loaded, error) {
	var problems []string // strictness violations, fatal unless configHardFail is false (with the wrong values decodeStrict finds)

	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// The decoder names a duplicate key without its parents: name the
		// field by its path when the duplicates can be found.
		if dups := duplicateFields(data); len(dups) > 0 {
			problems = append(problems, dups...)
		} else {
			problems = append(problems, err.Error())
		}
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
		obj, strict, wrong, err := decodeStrict[kpv1alpha1.KubeProxyConfiguration](js, raw)
		if err != nil {
			return nil, err
		}
		if len(wrong) > 0 {
			// A value its field cannot hold fails kube-proxy's lenient
			// decoding too.
			return nil, strictError(slices.Concat(problems, strict, wrong))
		}
		var lenient []string
		if problems = append(problems, strict...); len(problems) > 0 {
			// kube-proxy reads a v1alpha1 file whose only faults are unknown
			// or duplicate fields leniently (the last duplicate wins, unknown
			// fields are dropped) and logs why: so does kpng.
			slices.Sort(problems)
			lenient = []string{"using lenient decoding as strict decoding failed (as kube-proxy does for v1alpha1): " + strings.Join(problems, "; ")}
		}
		fileMode := obj.Mode
		if opts.Mode != nil {
			obj.Mode = kpv1alpha1.ProxyMode(*opts.Mode)
		}
		cfg, warnings, err := FromV1Alpha1(obj)
		if err != nil {
			if obj.Mode != fileMode {
				err = fmt.Errorf("with mode %q from the command line (the file says %q): %w", obj.Mode, fileMode, err)
			}
			return nil, err
		}
		return &Loaded{Config: cfg, APIVersion: apiVersion, Set: setFromV1Alpha1(known(raw, obj), ProxyMode(obj.Mode)), Warnings: append(lenient, warnings...)}, nil

	case v1alpha2.APIVersion:
		obj, strict, wrong, err := decodeStrict[v1alpha2.KubeProxyConfiguration](js, raw)
		if err != nil {
			return nil, err
		}
		problems = append(problems, strict...)
		var warnings []string
		if len(problems) > 0 || len(wrong) > 0 {
			// A configHardFail of the wrong type was dropped: true.
			if obj.ConfigHardFail == nil || *obj.ConfigHardFail {
				return nil, strictError(slices.Concat(problems, wrong))
			}
			for _, p := range problems {
				warnings = append(warnings, "ignored (configHardFail is false): "+p)
			}
			for _, w := range wrong {
				warnings = append(warnings, "reset to its default (configHardFail is false): "+w)
			}
		}
		cfg := FromV1Alpha2(obj) // v1alpha2 has no per-mode sections: mode changes nothing else
		if opts.Mode != nil {
			cfg.Mode = *opts.Mode
		}
		return &Loaded{Config: cfg, APIVersion: apiVersion, Set: setFromRaw(raw), Warnings: warnings}, nil

	default:
		return nil, fmt.Errorf("decoding configuration: apiVersion: got %q, want %q or %q", apiVersion, v1alpha1.APIVersion, v1alpha2.APIVersion)
	}
}

// decodeStrict decodes js, a document decoded as doc, into a new T
// case-sensitively. Separately from hard errors, it returns the strictness
// violations (unknown fields) and the values their field's type cannot hold
// ("syncPeriod: abc"), each naming its field path. A value of the wrong type
// is deleted from doc so that its field keeps its default, as an invalid
// value is reset with configHardFail: false; doc is left as what was
// decoded. (Duplicate fields were found in the YAML already.)
func decodeStrict[T any](js []byte, doc map[string]any) (obj *T, strict, wrong []string, err error) {
	obj = new(T)
	strictErrs, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		// The decoder stops at the first wrong value: find them all by
		// their path, drop them, and decode what is left.
		values := wrongValues(doc, reflect.TypeFor[T]())
		if len(values) == 0 || slices.ContainsFunc(values, func(w wrongValue) bool { return len(w.drop) == 0 }) {
			return nil, nil, nil, fmt.Errorf("decoding configuration: %w", err)
		}
		dropValues(doc, values)
		for _, w := range values {
			wrong = append(wrong, w.String())
		}
		if js, err = json.Marshal(doc); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding configuration: %w", err)
		}
		obj = new(T)
		if strictErrs, err = sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding configuration: %w (after dropping %s)", err, strings.Join(wrong, "; "))
		}
	}
	for _, e := range strictErrs {
		strict = append(strict, e.Error())
	}
	return obj, strict, wrong, nil
}

// strictError joins strictness violations into one error.
func strictError(problems []string) error {
	slices.Sort(problems)
	return fmt.Errorf("decoding configuration (strict): %s", strings.Join(problems, "; "))
}
