package backendtest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

func TestStateFromTheExampleCluster(t *testing.T) {
	st, ch := StateFromFile(t, "../../examples/cluster.yaml", "node-1")
	if !ch.Reset || st.NodeName != "node-1" || st.Node.GetZone() != "zone-a" {
		t.Fatalf("first state: reset=%v node=%v", ch.Reset, st.Node)
	}
	web := st.Services[backend.ServiceKey{Namespace: "default", Name: "web", Family: localv1.IPFamily_IPV6}]
	if web == nil || len(web.Endpoints) != 4 {
		t.Fatalf("default/web v6: %v", web)
	}
}

// An incremental backend driven through a sequence of cluster files.
func TestClusterSequence(t *testing.T) {
	c := NewCluster("n1")
	const svc = `
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: a}
spec: {clusterIP: 10.96.0.1, ports: [{name: p, port: 80}]}
`
	const eps = `
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: ns, name: a-1, labels: {kubernetes.io/service-name: a}}
addressType: IPv4
ports: [{name: p, port: 8080}]
endpoints: [{addresses: [IPS]}]
`
	var ops []string
	b := backend.FromIncremental(&recorder{ops: &ops})
	step := func(yaml string, want ...string) {
		t.Helper()
		c.Apply(t, []byte(yaml))
		st, ch := c.Next(t)
		ops = nil
		if err := b.Sync(context.Background(), st, ch); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ops, want) {
			t.Errorf("ops %q, want %q", ops, want)
		}
	}
	step(svc+strings.Replace(eps, "IPS", "10.0.0.1", 1), "reset", "svc a", "ep 10.0.0.1", "sync")
	step(svc+strings.Replace(eps, "IPS", "10.0.0.2", 1), "ep 10.0.0.2", "del-ep 10.0.0.1", "sync")
	step("", "del-ep 10.0.0.2", "del-svc a", "sync")
}

type recorder struct{ ops *[]string }

func (r *recorder) Reset()                             { *r.ops = append(*r.ops, "reset") }
func (r *recorder) SetService(s *localv1.Service)      { *r.ops = append(*r.ops, "svc "+s.Name) }
func (r *recorder) DeleteService(k backend.ServiceKey) { *r.ops = append(*r.ops, "del-svc "+k.Name) }
func (r *recorder) SetEndpoint(_ backend.ServiceKey, e *localv1.Endpoint) {
	*r.ops = append(*r.ops, "ep "+e.Ip)
}
func (r *recorder) DeleteEndpoint(_ backend.ServiceKey, e *localv1.Endpoint) {
	*r.ops = append(*r.ops, "del-ep "+e.Ip)
}
func (r *recorder) Sync() error { *r.ops = append(*r.ops, "sync"); return nil }
