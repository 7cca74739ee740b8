// Package file is a source of cluster state read from a file of Kubernetes
// objects (Services, EndpointSlices, Nodes, ServiceCIDRs, and Lists of
// them) as `kubectl get -o yaml` or `-o json` prints them. The file is
// watched: each change publishes the file's new content as one batch.
package file

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/cluster"
)

// Objects is the cluster state a file describes.
type Objects struct {
	Services       []*globalv1.Service
	EndpointSlices []*globalv1.EndpointSlice
	Nodes          []*globalv1.Node
	ServiceCIDRs   []*globalv1.ServiceCIDR
}

// Problem is something wrong in the file that was skipped: the rest of the
// file still applies.
type Problem struct {
	// Doc is the 1-based document number in the file (items of a List count
	// as their List's document).
	Doc int
	// Object names the object ("Service default/web", "List item 3"), when known.
	Object string
	Msg    string
}

func (p Problem) String() string {
	where := fmt.Sprintf("document %d", p.Doc)
	if p.Object != "" {
		where += " (" + p.Object + ")"
	}
	return where + ": " + p.Msg
}

// maxDocSize bounds one document, so that a corrupt file cannot exhaust memory.
const maxDocSize = 64 << 20

// Parse reads every document of a YAML or JSON stream. It never fails on
// content: anything it cannot use is reported as a Problem and skipped.
// Only a read error of r itself is returned as an error.
func Parse(r io.Reader) (*Objects, []Problem, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if first := firstByte(br); first == '{' || first == '[' {
		return parseJSONStream(br)
	}
	objs := &Objects{}
	var problems []Problem
	reader := utilyaml.NewYAMLReader(br)
	for doc := 1; ; doc++ {
		data, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(data) > maxDocSize {
			problems = append(problems, Problem{Doc: doc, Msg: fmt.Sprintf("document larger than %d bytes", maxDocSize)})
			continue
		}
		if len(bytes.TrimSpace(stripComments(data))) == 0 {
			doc-- // empty documents ("---" at the start or end) are not counted
			continue
		}
		problems = append(problems, parseDoc(doc, data, objs)...)
	}
	return objs, problems, nil
}

// firstByte peeks at the first byte that is not white space.
func firstByte(br *bufio.Reader) byte {
	for n := 1; ; n++ {
		b, err := br.Peek(n)
		if err != nil || len(b) < n {
			return 0
		}
		switch c := b[n-1]; c {
		case ' ', '\t', '\r', '\n':
		default:
			return c
		}
	}
}

// parseJSONStream reads concatenated JSON values (as `kubectl get -o json`
// prints one after another); a top-level array counts as a list.
func parseJSONStream(r io.Reader) (*Objects, []Problem, error) {
	objs := &Objects{}
	var problems []Problem
	dec := json.NewDecoder(io.LimitReader(r, 1<<40))
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// The stream cannot be resynchronised after a syntax error.
			problems = append(problems, Problem{Doc: doc, Msg: fmt.Sprintf("invalid JSON, rest of the file skipped: %v", err)})
			break
		}
		if err := duplicateKey(raw); err != nil {
			problems = append(problems, Problem{Doc: doc, Msg: fmt.Sprintf("not valid JSON: %v", err)})
			continue
		}
		if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				problems = append(problems, Problem{Doc: doc, Msg: err.Error()})
				continue
			}
			for i, item := range items {
				problems = append(problems, parseObject(doc, fmt.Sprintf("array item %d", i+1), item, objs)...)
			}
			continue
		}
		// JSON already: no conversion from YAML, which for one List of
		// 10,000 Services and their slices (20 MB) allocated about a
		// gigabyte to build the YAML tree.
		problems = append(problems, parseJSONDoc(doc, raw, objs)...)
	}
	return objs, problems, nil
}

// duplicateKey reports the first key that appears twice in one object of
// the JSON value js, which encoding/json would silently resolve to the
// last value (YAML's strict conversion refuses it, so JSON does too). It
// reads js token by token, keeping only the keys of the objects it is in.
func duplicateKey(js []byte) error {
	type frame struct {
		keys    map[string]bool // nil: an array
		wantKey bool            // the object's next token is a key or its end
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var stack []*frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			top := stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			key, _ := tok.(string)
			if top.keys[key] {
				return fmt.Errorf("key %q already set in an object", key)
			}
			top.keys[key] = true
			top.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

func stripComments(data []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

type typeMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

func parseDoc(doc int, data []byte, objs *Objects) []Problem {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// Strict decoding also rejects duplicate keys, which would otherwise
		// silently keep one of two values.
		return []Problem{{Doc: doc, Msg: fmt.Sprintf("not valid YAML or JSON: %v", err)}}
	}
	return parseJSONDoc(doc, js, objs)
}

// parseJSONDoc reads one document in JSON: an object, or a List of them.
func parseJSONDoc(doc int, js []byte, objs *Objects) []Problem {
	var tm typeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return []Problem{{Doc: doc, Msg: fmt.Sprintf("not a Kubernetes object: %v", err)}}
	}
	if tm.Kind == "List" || strings.HasSuffix(tm.Kind, "List") && tm.Items != nil {
		var problems []Problem
		for i, item := range tm.Items {
			problems = append(problems, parseObject(doc, fmt.Sprintf("%s item %d", tm.Kind, i+1), item, objs)...)
		}
		return problems
	}
	return parseObject(doc, "", js, objs)
}

// parseObject decodes one object. Unknown fields are reported but do not
// stop the object from being used: files written for newer Kubernetes
// versions still load.
func parseObject(doc int, where string, js []byte, objs *Objects) []Problem {
	var tm typeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return []Problem{{Doc: doc, Object: where, Msg: fmt.Sprintf("not a Kubernetes object: %v", err)}}
	}
	gvk := tm.APIVersion + ", Kind=" + tm.Kind
	var (
		problems []Problem
		warn     cluster.Warnings
		err      error
	)
	decode := func(into any, name func() string) bool {
		if e := strictJSON(js, into); e != nil {
			var syntax *json.SyntaxError
			var typeErr *json.UnmarshalTypeError
			if errors.As(e, &syntax) || errors.As(e, &typeErr) || json.Unmarshal(js, into) != nil {
				problems = append(problems, Problem{Doc: doc, Object: label(where, tm.Kind, ""), Msg: e.Error()})
				return false
			}
			problems = append(problems, Problem{Doc: doc, Object: label(where, tm.Kind, name()), Msg: e.Error() + " (ignored)"})
		}
		return true
	}
	switch gvk {
	case "v1, Kind=Service":
		var o corev1.Service
		if !decode(&o, func() string { return nsName(o.Namespace, o.Name) }) {
			return problems
		}
		defaultNamespace(&o.ObjectMeta.Namespace)
		var svc *globalv1.Service
		if svc, warn, err = cluster.ServiceFromK8s(&o); err == nil {
			objs.Services = append(objs.Services, svc)
		}
		where = label(where, "Service", nsName(o.Namespace, o.Name))
	case "discovery.k8s.io/v1, Kind=EndpointSlice":
		var o discoveryv1.EndpointSlice
		if !decode(&o, func() string { return nsName(o.Namespace, o.Name) }) {
			return problems
		}
		defaultNamespace(&o.ObjectMeta.Namespace)
		var sl *globalv1.EndpointSlice
		if sl, warn, err = cluster.EndpointSliceFromK8s(&o); err == nil {
			objs.EndpointSlices = append(objs.EndpointSlices, sl)
		}
		where = label(where, "EndpointSlice", nsName(o.Namespace, o.Name))
	case "v1, Kind=Node":
		var o corev1.Node
		if !decode(&o, func() string { return o.Name }) {
			return problems
		}
		var n *globalv1.Node
		if n, warn, err = cluster.NodeFromK8s(&o); err == nil {
			objs.Nodes = append(objs.Nodes, n)
		}
		where = label(where, "Node", o.Name)
	case "networking.k8s.io/v1, Kind=ServiceCIDR":
		var o networkingv1.ServiceCIDR
		if !decode(&o, func() string { return o.Name }) {
			return problems
		}
		var c *globalv1.ServiceCIDR
		if c, warn, err = cluster.ServiceCIDRFromK8s(&o); err == nil {
			objs.ServiceCIDRs = append(objs.ServiceCIDRs, c)
		}
		where = label(where, "ServiceCIDR", o.Name)
	default:
		if tm.Kind == "" {
			return []Problem{{Doc: doc, Object: where, Msg: "no kind: not a Kubernetes object"}}
		}
		return []Problem{{Doc: doc, Object: where, Msg: fmt.Sprintf("kind %q (apiVersion %q) is not one kpng reads; skipped", tm.Kind, tm.APIVersion)}}
	}
	if err != nil {
		problems = append(problems, Problem{Doc: doc, Object: where, Msg: err.Error() + "; skipped"})
	}
	for _, w := range warn {
		problems = append(problems, Problem{Doc: doc, Object: where, Msg: w})
	}
	return problems
}

func strictJSON(js []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

func label(where, kind, name string) string {
	l := kind
	if name != "" {
		l += " " + name
	}
	if where != "" {
		l = where + ", " + l
	}
	return l
}

func nsName(ns, name string) string {
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + name
}

// defaultNamespace applies kubectl's default: objects without a namespace
// are in "default".
func defaultNamespace(ns *string) {
	if *ns == "" {
		*ns = "default"
	}
}
