//go:build integration

package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kpng/kpng/cluster"
)

// Builders of the API objects the tests create, with the fields that
// matter spelled out and the rest defaulted by the API server.

func newNode(name, zone string, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{cluster.LabelTopologyZone: zone}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

// newService is a ClusterIP Service with port "http" 80 -> 8080, in both
// families when dualStack.
func newService(name string, dualStack bool, labels map[string]string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if dualStack {
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	}
	return svc
}

func newSlice(service, name string, family discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "kpng-test"}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

type epState int

const (
	ready       epState = iota
	terminating         // serving and terminating
	notServing          // terminating, not serving
)

// newEndpoint is an endpoint on a node in a zone, with zone hints.
func newEndpoint(ip, node, zone string, state epState, hintZones ...string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses: []string{ip},
		NodeName:  ptr.To(node),
		Zone:      ptr.To(zone),
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(state == ready),
			Serving:     ptr.To(state != notServing),
			Terminating: ptr.To(state != ready),
		},
	}
	if len(hintZones) > 0 {
		e.Hints = &discoveryv1.EndpointHints{}
		for _, z := range hintZones {
			e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
	return e
}

// objects creates, changes and deletes objects as the admin, failing the
// test on any error.
type objects struct {
	t *testing.T
	c kubernetes.Interface
}

var ctx = context.Background()

func (o objects) createNode(n *corev1.Node) {
	o.t.Helper()
	created, err := o.c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		o.t.Fatalf("creating node %s: %v", n.Name, err)
	}
	// Addresses are status: written separately, as the kubelet does.
	created.Status = n.Status
	if _, err := o.c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		o.t.Fatalf("node %s status: %v", n.Name, err)
	}
}

func (o objects) updateNode(name string, change func(*corev1.Node)) {
	o.t.Helper()
	n, err := o.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		o.t.Fatal(err)
	}
	change(n)
	if _, err := o.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		o.t.Fatalf("updating node %s: %v", name, err)
	}
}

func (o objects) createService(svc *corev1.Service) *corev1.Service {
	o.t.Helper()
	created, err := o.c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		o.t.Fatalf("creating service %s: %v", svc.Name, err)
	}
	return created
}

func (o objects) updateService(name string, change func(*corev1.Service)) {
	o.t.Helper()
	svc, err := o.c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		o.t.Fatal(err)
	}
	change(svc)
	if _, err := o.c.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		o.t.Fatalf("updating service %s: %v", name, err)
	}
}

func (o objects) deleteService(name string) {
	o.t.Helper()
	if err := o.c.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		o.t.Fatalf("deleting service %s: %v", name, err)
	}
}

func (o objects) createSlice(sl *discoveryv1.EndpointSlice) {
	o.t.Helper()
	if _, err := o.c.DiscoveryV1().EndpointSlices(sl.Namespace).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		o.t.Fatalf("creating endpointslice %s: %v", sl.Name, err)
	}
}

func (o objects) updateSlice(name string, change func(*discoveryv1.EndpointSlice)) {
	o.t.Helper()
	sl, err := o.c.DiscoveryV1().EndpointSlices("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		o.t.Fatal(err)
	}
	change(sl)
	if _, err := o.c.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		o.t.Fatalf("updating endpointslice %s: %v", name, err)
	}
}

func (o objects) deleteSlice(name string) {
	o.t.Helper()
	if err := o.c.DiscoveryV1().EndpointSlices("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		o.t.Fatalf("deleting endpointslice %s: %v", name, err)
	}
}
