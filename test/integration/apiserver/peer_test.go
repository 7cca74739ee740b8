//go:build integration

package apiserver

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// What a test writes through a peer while the Server's kube-apiserver is
// down is there when it comes back; a ServiceAccount's token outlives the
// restart; a stopped peer answers no more.
func TestPeerWritesWhileTheAPIServerIsDown(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.Apply("deploy/rbac.yaml")
	config, err := clientcmd.BuildConfigFromFlags("", s.ServiceAccountKubeconfig("kube-system", "kpng"))
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "doomed"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := s.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	s.StopAPIServer()
	peer := s.StartPeer()
	if err := peer.Client.CoreV1().Services("default").Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting through the peer: %v", err)
	}
	svc.Name = "born"
	if _, err := peer.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating through the peer: %v", err)
	}
	peer.Stop()
	if _, err := peer.Client.CoreV1().Services("default").Get(ctx, "born", metav1.GetOptions{}); err == nil {
		t.Error("the peer answered after Stop")
	}

	s.RestartAPIServer()
	if _, err := s.Client.CoreV1().Services("default").Get(ctx, "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Service deleted through the peer: %v, want not found", err)
	}
	// The ServiceAccount may be refused for a moment while the restarted
	// server's authorizer loads its roles.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := sa.CoreV1().Services("default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=born"})
		if last = err; err != nil {
			return false, nil
		}
		return len(list.Items) == 1, nil
	})
	if err != nil {
		t.Errorf("the ServiceAccount does not list the Service created through the peer: %v (last error: %v)", err, last)
	}
}
