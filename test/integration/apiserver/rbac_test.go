//go:build integration

package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestDeployRBACMatchesNodeProxier applies deploy/rbac.yaml and checks that
// kpng's ClusterRole grants what the API server's own bootstrap role for
// kube-proxy (system:node-proxier) grants, and that the ServiceAccount can
// use it and nothing more. It also shows that the test server enforces RBAC.
func TestDeployRBACMatchesNodeProxier(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var kpngRole *rbacv1.ClusterRole
	for _, obj := range s.Apply("deploy/rbac.yaml") {
		if r, ok := obj.(*rbacv1.ClusterRole); ok {
			kpngRole = r
		}
	}
	if kpngRole == nil {
		t.Fatalf("deploy/rbac.yaml has no ClusterRole")
	}

	upstream, err := s.Client.RbacV1().ClusterRoles().Get(ctx, "system:node-proxier", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the bootstrap ClusterRole: %v", err)
	}
	if got, want := ruleSet(kpngRole.Rules), ruleSet(upstream.Rules); !slices.Equal(got, want) {
		t.Errorf("ClusterRole %s grants\n\t%s\nsystem:node-proxier grants\n\t%s",
			kpngRole.Name, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}

	// Authenticate as the ServiceAccount, with a token the API server
	// issued for it.
	config, err := clientcmd.BuildConfigFromFlags("", s.ServiceAccountKubeconfig("kube-system", "kpng"))
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]func() error{
		"list services": func() error {
			_, err := sa.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list endpointslices": func() error {
			_, err := sa.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list servicecidrs": func() error {
			_, err := sa.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
			return err
		},
		"list nodes": func() error {
			_, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		},
		"create event": func() error {
			_, err := sa.CoreV1().Events("default").Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "kpng-"},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-a"},
				Reason:         "Test",
			}, metav1.CreateOptions{})
			return err
		},
	}
	forbidden := map[string]func() error{
		"list secrets": func() error {
			_, err := sa.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"create service": func() error {
			_, err := sa.CoreV1().Services("default").Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "kpng-may-not"},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			}, metav1.CreateOptions{})
			return err
		},
		"list pods": func() error {
			_, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		},
	}
	for name, do := range allowed {
		if err := do(); err != nil {
			t.Errorf("kpng ServiceAccount: %s: %v, want allowed", name, err)
		}
	}
	for name, do := range forbidden {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("kpng ServiceAccount: %s: got %v, want Forbidden", name, err)
		}
	}
}

// ruleSet flattens rules into sorted "group/resource verb" grants, so that
// two roles compare equal however their rules are grouped.
func ruleSet(rules []rbacv1.PolicyRule) []string {
	var set []string
	for _, r := range rules {
		for _, v := range r.Verbs {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					grant := fmt.Sprintf("%q/%s %s", g, res, v)
					if len(r.ResourceNames) > 0 {
						grant += fmt.Sprintf(" names=%v", r.ResourceNames)
					}
					set = append(set, grant)
				}
			}
			for _, u := range r.NonResourceURLs {
				set = append(set, fmt.Sprintf("url %s %s", u, v))
			}
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}
