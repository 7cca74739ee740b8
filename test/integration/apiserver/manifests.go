package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// Apply creates the objects of a multi-document YAML file (a path relative
// to the repository root, such as deploy/rbac.yaml) as the admin, and
// returns them. It knows the kinds kpng's manifests hold: ServiceAccounts,
// ClusterRoles and ClusterRoleBindings.
func (s *Server) Apply(path string) []runtime.Object {
	s.t.Helper()
	if !filepath.IsAbs(path) {
		root, err := repoRoot()
		if err != nil {
			s.t.Fatalf("test API server: %v", err)
		}
		path = filepath.Join(root, path)
	}
	objs, err := readManifests(path)
	if err != nil {
		s.t.Fatalf("test API server: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, obj := range objs {
		if err := create(ctx, s.Client, obj); err != nil {
			s.t.Fatalf("test API server: applying %s: %v", path, err)
		}
	}
	return objs
}

// readManifests decodes every object in a multi-document YAML file.
func readManifests(path string) ([]runtime.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		objs = append(objs, obj)
	}
}

// create creates one of the object kinds Apply knows.
func create(ctx context.Context, c kubernetes.Interface, obj runtime.Object) error {
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	return err
}
