package manifests

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/kpng/kpng/test/integration/apiserver"
)

// deployDir is the repository's deploy/ folder.
const deployDir = "../../deploy"

// kustomizations returns every folder under deploy/ with a kustomization.
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(deployDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 2 {
		t.Fatalf("found %d kustomizations under deploy/ (%v); want kube-proxy-replacement and split at least", len(dirs), dirs)
	}
	slices.Sort(dirs)
	return dirs
}

// build runs kustomize on dir and returns its objects.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		objs = append(objs, u)
	}
	return objs
}

// TestKustomizationsAreAccepted builds every kustomization under deploy/
// and applies each object with server-side dry-run against a real API
// server, in which kubeadm's kube-proxy ConfigMap, ServiceAccount and
// binding exist as kubeadm creates them: a manifest the API server would
// refuse fails here.
func TestKustomizationsAreAccepted(t *testing.T) {
	// Like every real cluster kube-proxy runs in: privileged pods allowed.
	s := apiserver.Start(t, apiserver.WithAPIServerArgs("--allow-privileged=true"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubeadmKubeProxy(ctx, t, s)

	dyn, err := dynamic.NewForConfig(s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(s.Client.Discovery()))
	dryRunApply := func(u *unstructured.Unstructured) error {
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		b, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		ri := dyn.Resource(mapping.Resource)
		opts := metav1.PatchOptions{FieldManager: "kpng-manifests-test", DryRun: []string{metav1.DryRunAll}, Force: ptr(true)}
		if ns := u.GetNamespace(); ns != "" {
			_, err = ri.Namespace(ns).Patch(ctx, u.GetName(), types.ApplyPatchType, b, opts)
		} else {
			_, err = ri.Patch(ctx, u.GetName(), types.ApplyPatchType, b, opts)
		}
		return err
	}

	for _, dir := range kustomizations(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objs := build(t, dir)
			for _, u := range objs {
				if err := dryRunApply(u); err != nil {
					t.Errorf("%s %s/%s: the API server refuses it: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
				}
			}
			if filepath.Base(dir) == "kube-proxy-replacement" {
				checkReplacement(t, objs)
			}
		})
	}

	// The dry-run refuses what the API server would refuse: a DaemonSet
	// with a hostPath of an unknown type.
	bad := build(t, filepath.Join(deployDir, "kube-proxy-replacement"))[0].DeepCopy()
	vols, _, _ := unstructured.NestedSlice(bad.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		if hp, ok := v.(map[string]any)["hostPath"].(map[string]any); ok {
			hp["type"] = "NotAType"
		}
	}
	if err := unstructured.SetNestedSlice(bad.Object, vols, "spec", "template", "spec", "volumes"); err != nil {
		t.Fatal(err)
	}
	if err := dryRunApply(bad); err == nil || !strings.Contains(err.Error(), "NotAType") {
		t.Errorf("a DaemonSet with hostPath type NotAType: %v; want the API server to refuse it, naming the value", err)
	}
}

// checkReplacement checks that the replacement DaemonSet uses kubeadm's
// kube-proxy ConfigMap and ServiceAccount, and kube-proxy's health port.
func checkReplacement(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	if len(objs) != 1 || objs[0].GetKind() != "DaemonSet" || objs[0].GetNamespace() != "kube-system" {
		t.Fatalf("kube-proxy-replacement: want one DaemonSet in kube-system, got %d objects", len(objs))
	}
	spec := objs[0].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if sa := spec["serviceAccountName"]; sa != "kube-proxy" {
		t.Errorf("serviceAccountName %v; want kubeadm's kube-proxy", sa)
	}
	if spec["hostNetwork"] != true || spec["priorityClassName"] != "system-node-critical" {
		t.Errorf("hostNetwork %v, priorityClassName %v; want true and system-node-critical, as kube-proxy", spec["hostNetwork"], spec["priorityClassName"])
	}
	b, _ := yaml.Marshal(spec)
	for _, want := range []string{"name: kube-proxy\n", "--config=/var/lib/kube-proxy/config.conf", "port: 10256", "/run/xtables.lock", "/lib/modules", "operator: Exists"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the replacement's pod spec lacks %q:\n%s", want, b)
		}
	}
}

// kubeadmKubeProxy creates what kubeadm creates for kube-proxy and what the
// replacement DaemonSet reads: the ServiceAccount, its binding to
// system:node-proxier, and the ConfigMap.
func kubeadmKubeProxy(ctx context.Context, t *testing.T, s *apiserver.Server) {
	t.Helper()
	c := s.Client
	if _, err := c.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-proxier"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kube-proxy", Namespace: "kube-system"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Labels: map[string]string{"app": "kube-proxy"}},
		Data:       map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
