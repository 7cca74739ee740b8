package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	sigsjson "sigs.k8s.io/json"
)

// A value of the wrong type ("syncPeriod: abc", "maxPerCore: x") makes the
// JSON decoder stop, and its message names the field only sometimes (never
// for types with their own decoder, such as durations). wrongValues finds
// each such value by decoding the document field by field against the Go
// type, so that it can be named by its path and dropped: the field then
// keeps its default, as an invalid value does with configHardFail false.

// wrongValue is a value the Go type of its field cannot hold.
type wrongValue struct {
	// path names the field as written: linux.conntrack.maxPerCore,
	// logging.vmodule[0].verbosity, featureGates.SomeGate.
	path string
	// drop is the chain of object keys to delete so that the field takes
	// its default: the field itself, or the whole list an element is in.
	drop []string
	err  error
}

func (w wrongValue) String() string {
	return fmt.Sprintf("field %q: %v", w.path, w.err)
}

// wrongValues lists the values of doc (a decoded JSON object) that t, the
// Go type doc is decoded into, cannot hold. Unknown fields are not its
// concern (the strict decoder names them).
func wrongValues(doc map[string]any, t reflect.Type) []wrongValue {
	var out []wrongValue
	walkValue(doc, t, "", nil, false, &out)
	return out
}

// walkValue reports v at path if t cannot hold it, descending into objects
// and lists to name the innermost field at fault. Inside a list, drop stays
// the list's (inList).
func walkValue(v any, t reflect.Type, path string, drop []string, inList bool, out *[]wrongValue) {
	child := func(k string) []string {
		if inList {
			return drop
		}
		return appendKey(drop, k)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	err := decodeAs(v, t)
	if err == nil {
		return
	}
	before := len(*out)
	switch v := v.(type) {
	case map[string]any:
		if hasOwnDecoder(t) {
			break
		}
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			for _, k := range sortedKeys(v) {
				if ft, ok := fields[k]; ok {
					walkValue(v[k], ft, join(path, k), child(k), inList, out)
				}
			}
		case reflect.Map:
			if t.Key().Kind() == reflect.String {
				for _, k := range sortedKeys(v) {
					walkValue(v[k], t.Elem(), join(path, k), child(k), inList, out)
				}
			}
		}
	case []any:
		if hasOwnDecoder(t) || t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			break
		}
		for i, e := range v {
			// A bad element resets the whole list, as Check does.
			walkValue(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", drop, true, out)
		}
	}
	if len(*out) == before {
		*out = append(*out, wrongValue{path: path, drop: slices.Clone(drop), err: describe(v, err)})
	}
}

// decodeAs decodes v, as the configuration decoder would, into a new t.
func decodeAs(v any, t reflect.Type) error {
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return sigsjson.UnmarshalCaseSensitivePreserveInts(js, reflect.New(t).Interface())
}

// describe says what is wrong with v, quoting it (shortened) before the
// decoder's reason.
func describe(v any, err error) error {
	js, _ := json.Marshal(v)
	s := string(js)
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return fmt.Errorf("invalid value %s: %w", s, err)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// hasOwnDecoder reports whether t decodes itself (metav1.Duration,
// resource.Quantity, ...): its parts are not fields to walk into.
func hasOwnDecoder(t reflect.Type) bool {
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

// jsonFields maps the JSON names of struct t's fields, including those of
// embedded structs without a name of their own (metav1.TypeMeta), to their
// types, as encoding/json names them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			for n, typ := range jsonFields(ft) {
				if _, ok := fields[n]; !ok {
					fields[n] = typ
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// dropValues deletes each wrong value's drop chain from doc.
func dropValues(doc map[string]any, wrong []wrongValue) {
	for _, w := range wrong {
		m := doc
		for i, k := range w.drop {
			if i == len(w.drop)-1 {
				delete(m, k)
				break
			}
			next, ok := m[k].(map[string]any)
			if !ok {
				break
			}
			m = next
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func appendKey(drop []string, k string) []string {
	return append(slices.Clip(drop), k)
}
