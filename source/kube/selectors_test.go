package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kpng/kpng/cluster"
)

// The selectors are the strings kube-proxy v1.36 sends
// (cmd/kube-proxy/app/server.go, pkg/proxy/node.go), so that the API server
// sends kpng exactly what it sends kube-proxy.
func TestSelectorsAreKubeProxys(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  selector
		want selector
	}{
		{"services", must(serviceSelector("")), selector{
			label: "!service.kubernetes.io/service-proxy-name",
			field: "spec.clusterIP!=None",
		}},
		{"services with a proxy name: every label, filtered by kpng", must(serviceSelector("kpng")), selector{
			field: "spec.clusterIP!=None",
		}},
		{"endpoint slices", endpointSliceSelector(), selector{label: "!service.kubernetes.io/headless"}},
		{"this node", nodeSelector("node-1"), selector{field: "metadata.name=node-1"}},
		{"every node (fan-out)", nodeSelector(""), selector{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("selector %+v, want %+v", tc.got, tc.want)
			}
			// And the API machinery reads them back.
			if _, err := labels.Parse(tc.got.label); err != nil {
				t.Errorf("label selector: %v", err)
			}
			if _, err := fields.ParseSelector(tc.got.field); err != nil {
				t.Errorf("field selector: %v", err)
			}
		})
	}
}

func TestServiceSelectorRejectsAnInvalidProxyName(t *testing.T) {
	if _, err := serviceSelector("not a label value!"); err == nil {
		t.Error("no error for an invalid label value")
	}
}

// With a proxy name the watch has every Service; kpng keeps the unlabelled
// ones and those labelled with its name, and removes a Service whose label
// moves it to another proxy.
func TestServiceSetterKeepsOnlyThisProxysServices(t *testing.T) {
	svc := func(name string, proxy *string) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"},
				Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if proxy != nil {
			s.Labels = map[string]string{cluster.LabelServiceProxyName: *proxy}
		}
		return s
	}
	mine, other := "kpng", "other"
	store := cluster.NewStore()
	set := serviceSetter(mine)
	store.Update(func(tx *cluster.Tx) {
		for _, s := range []*corev1.Service{svc("unlabelled", nil), svc("mine", &mine), svc("other", &other)} {
			if _, err := set(tx, s); err != nil {
				t.Fatal(err)
			}
		}
	})
	has := func(name string) (ok bool) {
		store.View(func(r cluster.Reader) { ok = r.Service(cluster.Key("ns", name)) != nil })
		return ok
	}
	if !has("unlabelled") || !has("mine") || has("other") {
		t.Errorf("stored unlabelled=%v mine=%v other=%v, want true true false", has("unlabelled"), has("mine"), has("other"))
	}
	store.Update(func(tx *cluster.Tx) {
		if _, err := set(tx, svc("mine", &other)); err != nil {
			t.Fatal(err)
		}
	})
	if has("mine") {
		t.Error("a Service relabelled for another proxy is still stored")
	}
}

func TestTrimDropsManagedFieldsAndLastApplied(t *testing.T) {
	in := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name:          "s",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations: map[string]string{
			lastAppliedAnnotation:         "{...}",
			cluster.AnnotationTriggerTime: "2024-01-01T00:00:00Z",
		},
	}}
	out, err := trim(in)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if got.ManagedFields != nil {
		t.Error("managed fields kept")
	}
	if _, ok := got.Annotations[lastAppliedAnnotation]; ok {
		t.Error("last-applied annotation kept")
	}
	if got.Annotations[cluster.AnnotationTriggerTime] == "" {
		t.Error("the trigger-time annotation, which kpng reads, was dropped")
	}
}

func must(sel selector, err error) selector {
	if err != nil {
		panic(err)
	}
	return sel
}
