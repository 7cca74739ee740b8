//go:build integration

package apiserver

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// TestServerKeepsObjectsAcrossAPIServerRestart proves what tests rely on:
// dual-stack Services and EndpointSlices can be written and read, requests
// fail while kube-apiserver is down, and the objects are still there after
// it comes back on the same address, where watching clients find it again.
func TestServerKeepsObjectsAcrossAPIServerRestart(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const ns = "default"
	svc, err := s.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports:          []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating dual-stack Service: %v", err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("dual-stack Service got cluster IPs %v, want one per family", svc.Spec.ClusterIPs)
	}
	t.Logf("Service cluster IPs: %v", svc.Spec.ClusterIPs)

	slice, err := s.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "web-ipv4",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To("node-a"),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating EndpointSlice: %v", err)
	}

	// The kubeconfig file is what other programs get: it must work too.
	fromFile, err := clientcmd.BuildConfigFromFlags("", s.KubeconfigPath)
	if err != nil {
		t.Fatalf("loading %s: %v", s.KubeconfigPath, err)
	}
	fileClient, err := kubernetes.NewForConfig(fromFile)
	if err != nil {
		t.Fatalf("client from kubeconfig: %v", err)
	}
	checkObjects := func(c kubernetes.Interface) {
		t.Helper()
		got, err := c.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading Service: %v", err)
		}
		if !slices.Equal(got.Spec.ClusterIPs, svc.Spec.ClusterIPs) || got.UID != svc.UID {
			t.Fatalf("Service is %s %v, want %s %v", got.UID, got.Spec.ClusterIPs, svc.UID, svc.Spec.ClusterIPs)
		}
		gotSlice, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-ipv4", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading EndpointSlice: %v", err)
		}
		if gotSlice.UID != slice.UID || len(gotSlice.Endpoints) != 1 || gotSlice.Endpoints[0].Addresses[0] != "10.244.1.5" {
			t.Fatalf("EndpointSlice is %s %+v, want %s with endpoint 10.244.1.5", gotSlice.UID, gotSlice.Endpoints, slice.UID)
		}
	}
	checkObjects(s.Client)
	checkObjects(fileClient)

	// A watching client, as kpng's kube source is, must resume by itself.
	factory := informers.NewSharedInformerFactory(s.Client, 0)
	services := factory.Core().V1().Services().Informer()
	stop := make(chan struct{})
	defer func() {
		close(stop)
		factory.Shutdown()
	}()
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), services.HasSynced) {
		t.Fatalf("Service informer did not sync")
	}

	s.StopAPIServer()
	if _, err := s.Client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Fatalf("reading a Service succeeded while kube-apiserver was stopped")
	} else {
		t.Logf("while stopped: %v", err)
	}

	s.RestartAPIServer()
	checkObjects(s.Client)

	restarted := time.Now()
	if _, err := s.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "after-restart"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Service after the restart: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, exists, err := services.GetStore().GetByKey(ns + "/after-restart")
		return exists, err
	})
	if err != nil {
		t.Fatalf("the Service informer did not see a Service created after the restart: %v", err)
	}
	t.Logf("informer saw a Service created after the restart in %v", time.Since(restarted).Round(time.Millisecond))
}
