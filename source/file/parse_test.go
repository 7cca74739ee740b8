package file

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func parseString(t *testing.T, s string) (*Objects, []string) {
	t.Helper()
	objs, problems, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.String())
	}
	return objs, msgs
}

func TestParseExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, problems := parseString(t, string(data))
	if len(problems) != 0 {
		t.Errorf("the example has problems: %v", problems)
	}
	if len(objs.Nodes) != 3 || len(objs.Services) != 8 || len(objs.EndpointSlices) != 5 {
		t.Errorf("got %d nodes, %d services, %d slices; want 3, 8, 5", len(objs.Nodes), len(objs.Services), len(objs.EndpointSlices))
	}
}

// Each case has one bad thing; the good Service beside it must still load,
// and the problem must name where it is.
func TestParseBadInputIsReportedAndSkipped(t *testing.T) {
	const good = `
apiVersion: v1
kind: Service
metadata: {name: good}
spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}
`
	cases := []struct {
		name string
		doc  string
		want []string // substrings of the one problem
	}{
		{"malformed YAML", "kind: Service\n  metadata: [", []string{"document 1", "not valid YAML"}},
		{"unknown kind", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}", []string{"document 1", `kind "Deployment"`}},
		{"no kind", "metadata: {name: x}", []string{"document 1", "no kind"}},
		{"invalid cluster IP", "apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {clusterIP: 10.96.0.300}",
			[]string{"Service default/bad", "spec.clusterIPs[0]", `"10.96.0.300"`, "skipped"}},
		{"invalid port", "apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {clusterIP: 10.96.0.2, ports: [{port: 70000}]}",
			[]string{"Service default/bad", "spec.ports[0]", "70000"}},
		{"wrong field type", "apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {clusterIP: [1, 2]}",
			[]string{"document 1", "Service", "cannot unmarshal"}},
		{"unknown field", "apiVersion: v1\nkind: Service\nmetadata: {name: odd}\nspec: {clusterIP: 10.96.0.3, colour: blue}",
			[]string{"Service default/odd", `unknown field "colour"`, "ignored"}},
		{"slice without service label", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4",
			[]string{"EndpointSlice default/s", "kubernetes.io/service-name"}},
		{"endpoint address of the wrong family", `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s, labels: {kubernetes.io/service-name: good}}
addressType: IPv4
endpoints: [{addresses: ["fd00::1"]}]`, []string{"EndpointSlice default/s", "endpoints[0]", "not of type IPv4"}},
		{"null conditions and hints", `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s, labels: {kubernetes.io/service-name: good}}
addressType: IPv4
ports: [{name: null, port: null, protocol: null}]
endpoints: [{addresses: ["10.0.0.1"], conditions: null, hints: null, nodeName: null}]
extra: 1`, []string{"unknown field \"extra\""}},
		{"duplicate key", "apiVersion: v1\nkind: Service\nkind: Service\nmetadata: {name: dup}", []string{"document 1"}},
		{"list with a bad item", `apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}}
- {apiVersion: v1, kind: Secret, metadata: {name: nope}}`, []string{"document 1", "List item 2", `kind "Secret"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, problems := parseString(t, tc.doc+"\n---\n"+good)
			if len(problems) != 1 {
				t.Fatalf("want one problem, got %q", problems)
			}
			for _, w := range tc.want {
				if !strings.Contains(problems[0], w) {
					t.Errorf("problem %q does not mention %q", problems[0], w)
				}
			}
			found := false
			for _, s := range objs.Services {
				found = found || s.Name == "good"
			}
			if !found {
				t.Errorf("the good Service after the bad document was not loaded")
			}
		})
	}
}

func TestParseJSONStreamAndArray(t *testing.T) {
	const js = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"x"},"spec":{"clusterIP":"10.96.0.1"}}
{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}]}
[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2"}}]`
	objs, problems := parseString(t, js)
	if len(problems) != 0 {
		t.Errorf("problems: %v", problems)
	}
	if len(objs.Services) != 1 || objs.Services[0].Namespace != "x" || len(objs.Nodes) != 2 {
		t.Errorf("got %+v", objs)
	}
}

// TestParseJSONRefusesDuplicateKeys: JSON is read without the YAML
// conversion that refuses a key set twice in one object, so its own check
// must: in a plain object, in a List's item, deep in a spec, and in an
// array's item. The same key in two different objects is fine.
func TestParseJSONRefusesDuplicateKeys(t *testing.T) {
	const good = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"good"},"spec":{"ports":[{"name":"a","port":1},{"name":"b","port":2}]}}`
	for _, tc := range []struct{ name, doc, key string }{
		{"object", `{"apiVersion":"v1","kind":"Service","kind":"Service","metadata":{"name":"dup"}}`, "kind"},
		{"list item", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","name":"m"}}]}`, "name"},
		{"deep", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"dup"},"spec":{"ports":[{"port":1,"port":2}]}}`, "port"},
		{"array item", `[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"metadata":{"name":"m"}}]`, "metadata"},
		{"escaped", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","n\u0061me":"m"}}`, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, problems := parseString(t, tc.doc+"\n"+good)
			if len(problems) != 1 || !strings.Contains(problems[0], "document 1") || !strings.Contains(problems[0], `"`+tc.key+`" already set`) {
				t.Fatalf("want one problem naming key %q in document 1, got %q", tc.key, problems)
			}
			if len(objs.Nodes) != 0 || len(objs.Services) != 1 || objs.Services[0].Name != "good" {
				t.Errorf("want only the good Service loaded, got %+v", objs)
			}
		})
	}
}

func TestParseCountsDocumentsLikeAPerson(t *testing.T) {
	// Leading "---", comments-only documents and trailing separators are
	// not documents: the bad one here is the second.
	const y = "---\n# comment\n---\napiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n---\nkind: Mystery\n---\n"
	_, problems := parseString(t, y)
	if len(problems) != 1 || !strings.HasPrefix(problems[0], "document 2") {
		t.Errorf("problems = %q, want one in document 2", problems)
	}
}

// BenchmarkParseJSONList10k: one JSON List of 10,000 Services and their
// EndpointSlices (10 endpoints each, about 20 MB), as `kubectl get -o json`
// writes a cluster. Read without converting it to YAML first, which
// allocated about a gigabyte for it (a process peak of 868 MiB).
func BenchmarkParseJSONList10k(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"apiVersion":"v1","kind":"List","items":[`)
	for i := range 10000 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc-%d","namespace":"bench"},"spec":{"clusterIP":"10.96.%d.%d","ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080}]}},`, i, i/256, i%256)
		fmt.Fprintf(&sb, `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"svc-%d-x","namespace":"bench","labels":{"kubernetes.io/service-name":"svc-%d"}},"addressType":"IPv4","ports":[{"name":"http","protocol":"TCP","port":8080}],"endpoints":[`, i, i)
		for j := range 10 {
			if j > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"addresses":["10.%d.%d.%d"],"conditions":{"ready":true},"nodeName":"node-%d"}`, 128+j, i/256, i%256, j)
		}
		sb.WriteString("]}")
	}
	sb.WriteString("]}")
	data := sb.String()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		objs, problems, err := Parse(strings.NewReader(data))
		if err != nil || len(problems) != 0 || len(objs.Services) != 10000 {
			b.Fatalf("err %v, problems %v, %d services", err, problems, len(objs.Services))
		}
	}
}
