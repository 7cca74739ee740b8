package kube

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kube-proxy's client flags: --kubeconfig, --master overriding its
// server, the in-cluster config with neither; protobuf by default with
// JSON accepted; QPS and burst as given.
func TestClientConfigIsKubeProxys(t *testing.T) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://from-kubeconfig:6443"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "secret"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	defaults := ClientConfig{QPS: DefaultQPS, Burst: DefaultBurst, ContentType: DefaultContentType}

	for _, tc := range []struct {
		name       string
		kubeconfig string
		master     string
		wantHost   string
		wantToken  string
	}{
		{"kubeconfig", path, "", "https://from-kubeconfig:6443", "secret"},
		{"master overrides the kubeconfig's server", path, "https://master:6443", "https://master:6443", "secret"},
		{"master alone", "", "https://master:6443", "https://master:6443", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := defaults
			cc.Kubeconfig, cc.Master = tc.kubeconfig, tc.master
			rc, err := cc.RESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			if rc.Host != tc.wantHost || rc.BearerToken != tc.wantToken {
				t.Errorf("host %q token %q, want %q %q", rc.Host, rc.BearerToken, tc.wantHost, tc.wantToken)
			}
			if rc.QPS != DefaultQPS || rc.Burst != DefaultBurst {
				t.Errorf("QPS %v burst %d, want %v %d", rc.QPS, rc.Burst, DefaultQPS, DefaultBurst)
			}
			if rc.ContentType != "application/vnd.kubernetes.protobuf" ||
				rc.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
				t.Errorf("content type %q, accept %q: want protobuf, and JSON accepted", rc.ContentType, rc.AcceptContentTypes)
			}
		})
	}

	t.Run("neither: in-cluster", func(t *testing.T) {
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		t.Setenv("KUBERNETES_SERVICE_PORT", "")
		_, err := defaults.RESTConfig()
		if err == nil || !strings.Contains(err.Error(), "in-cluster") {
			t.Errorf("outside a pod with no flags: %v, want an error about the in-cluster config", err)
		}
	})
	t.Run("a kubeconfig that does not exist", func(t *testing.T) {
		cc := defaults
		cc.Kubeconfig = filepath.Join(t.TempDir(), "missing")
		if _, err := cc.RESTConfig(); err == nil || !strings.Contains(err.Error(), cc.Kubeconfig) {
			t.Errorf("missing kubeconfig: %v, want an error naming it", err)
		}
	})
}
