package apiserver

import (
	"context"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ServiceAccountKubeconfig writes a kubeconfig that authenticates to the
// Server's kube-apiserver as the ServiceAccount namespace/name, which must
// exist, with a token the API server issued for it (TokenRequest), as a
// pod running as that ServiceAccount gets; and returns its path. The
// client may do what RBAC grants the ServiceAccount, and nothing more. The
// token lasts an hour and survives API server restarts.
func (s *Server) ServiceAccountKubeconfig(namespace, name string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := s.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("test API server: a token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	path := filepath.Join(s.dir, "kubeconfig-"+namespace+"-"+name)
	user := "system:serviceaccount:" + namespace + ":" + name
	if _, err := s.writeKubeconfig(path, s.URL, user, tr.Status.Token); err != nil {
		s.t.Fatalf("test API server: %v", err)
	}
	return path
}
