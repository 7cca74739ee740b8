package pki

import (
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The Secrets deploy/split mounts: each holds tls.crt, tls.key and ca.crt.
const (
	BrainSecret = "kpng-brain-tls"
	AgentSecret = "kpng-agent-tls"
)

// SplitSecrets makes a new CA, a serving certificate for the brain naming
// brainNames (the DNS names or IP addresses agents dial) and a client
// certificate for the agents, valid from now for validity, and returns
// them as the two Secrets of deploy/split, in namespace.
func SplitSecrets(brainNames []string, namespace string, validity time.Duration, now time.Time) ([]corev1.Secret, error) {
	if len(brainNames) == 0 {
		return nil, errors.New("no brain name: the brain's certificate must name what agents dial")
	}
	if validity <= 0 {
		return nil, fmt.Errorf("validity %v: must be positive", validity)
	}
	ca, err := NewCA("kpng CA", now.Add(-time.Hour), now.Add(validity))
	if err != nil {
		return nil, err
	}
	var secrets []corev1.Secret
	for _, s := range []struct {
		name string
		req  Request
	}{
		{BrainSecret, Request{CommonName: "kpng-brain", Server: true, Hosts: brainNames}},
		{AgentSecret, Request{CommonName: "kpng-agent"}},
	} {
		kp, err := ca.Issue(s.req)
		if err != nil {
			return nil, err
		}
		secrets = append(secrets, corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "kpng"}},
			Type:       corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey:       kp.CertPEM,
				corev1.TLSPrivateKeyKey: kp.KeyPEM,
				"ca.crt":                ca.CertPEM,
			},
		})
	}
	return secrets, nil
}

// WriteYAML writes secrets as a YAML stream, for kubectl apply -f.
func WriteYAML(w io.Writer, secrets []corev1.Secret) error {
	for i, s := range secrets {
		b, err := yaml.Marshal(s)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
