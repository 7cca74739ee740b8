package kube

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

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
	w := &writer{store: store, logger: klog.Background()}
	transform := convertWith(convertService(mine))
	del := func(tx *cluster.Tx, ns, name string) { tx.DeleteService(ns, name) }
	put := func(s *corev1.Service) {
		c, err := transform(s)
		if err != nil {
			t.Fatal(err)
		}
		if c.(*cached).err != nil {
			t.Fatal(c.(*cached).err)
		}
		w.write(c.(*cached), del)
	}
	for _, s := range []*corev1.Service{svc("unlabelled", nil), svc("mine", &mine), svc("other", &other)} {
		put(s)
	}
	has := func(name string) (ok bool) {
		store.View(func(r cluster.Reader) { ok = r.Service(cluster.Key("ns", name)) != nil })
		return ok
	}
	if !has("unlabelled") || !has("mine") || has("other") {
		t.Errorf("stored unlabelled=%v mine=%v other=%v, want true true false", has("unlabelled"), has("mine"), has("other"))
	}
	put(svc("mine", &other))
	if has("mine") {
		t.Error("a Service relabelled for another proxy is still stored")
	}
}

// The informers keep, of an API object, its identity and the converted
// object only; a second transform changes nothing; an object that does not
// convert is removed from the store when it comes, with its error kept.
func TestInformersKeepOnlyTheConvertedObject(t *testing.T) {
	in := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "s", ResourceVersion: "42", UID: "u",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			Labels:        map[string]string{"app": "x"},
		},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	transform := convertWith(convertService(""))
	out, err := transform(in)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := out.(*cached)
	if !ok {
		t.Fatalf("transform gave %T, want *cached", out)
	}
	if want := (metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "42"}); !reflect.DeepEqual(c.ObjectMeta, want) {
		t.Errorf("kept metadata %+v, want only %+v", c.ObjectMeta, want)
	}
	if again, _ := transform(c); again != out {
		t.Error("transforming a converted object again changed it")
	}
	if tomb, _ := transform(cache.DeletedFinalStateUnknown{Key: "ns/s"}); tomb != (cache.DeletedFinalStateUnknown{Key: "ns/s"}) {
		t.Errorf("a tombstone became %v", tomb)
	}

	store := cluster.NewStore()
	w := &writer{store: store, logger: klog.Background()}
	del := func(tx *cluster.Tx, ns, name string) { tx.DeleteService(ns, name) }
	w.write(c, del)
	stored := func() (ok bool) {
		store.View(func(r cluster.Reader) { ok = r.Service(cluster.Key("ns", "s")) != nil })
		return ok
	}
	if !stored() {
		t.Fatal("the converted Service was not stored")
	}
	bad := in.DeepCopy()
	bad.Spec.Type = "Bogus"
	out, _ = transform(bad)
	if out.(*cached).err == nil {
		t.Fatal("a Service of an unknown type converted")
	}
	w.write(out.(*cached), del)
	if stored() {
		t.Error("a Service that no longer converts is still stored")
	}
}

func must(sel selector, err error) selector {
	if err != nil {
		panic(err)
	}
	return sel
}
