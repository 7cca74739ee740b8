package main

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/server"
)

// TestCertsSecretsServeMutualTLS: the Secrets kpng certs writes, mounted as
// files, let an agent reach the brain by the name given, with each side
// checking the other; the brain's certificate is refused under a name it
// does not carry.
func TestCertsSecretsServeMutualTLS(t *testing.T) {
	var out bytes.Buffer
	if err := writeCertSecrets(&out, certOptions{brainNames: []string{"127.0.0.1", "brain.example.internal"}, namespace: "kube-system", validity: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(out.String(), "---\n")
	if len(docs) != 2 {
		t.Fatalf("%d YAML documents; want 2:\n%s", len(docs), out.String())
	}
	dirs := map[string]string{}
	for _, d := range docs {
		var s corev1.Secret
		if err := yaml.UnmarshalStrict([]byte(d), &s); err != nil {
			t.Fatal(err)
		}
		if s.Namespace != "kube-system" || s.Type != corev1.SecretTypeTLS {
			t.Errorf("secret %s/%s of type %s", s.Namespace, s.Name, s.Type)
		}
		dir := t.TempDir()
		for k, v := range s.Data {
			if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		dirs[s.Name] = dir
	}
	b, a := dirs["kpng-brain-tls"], dirs["kpng-agent-tls"]
	if b == "" || a == "" {
		t.Fatalf("secrets %v; want kpng-brain-tls and kpng-agent-tls", dirs)
	}
	srv, err := server.ServerTLS(filepath.Join(b, "tls.crt"), filepath.Join(b, "tls.key"), filepath.Join(b, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"127.0.0.1", true}, {"brain.example.internal", true}, {"other.example.internal", false}} {
		cfg, err := client.TLSConfig(filepath.Join(a, "tls.crt"), filepath.Join(a, "tls.key"), filepath.Join(a, "ca.crt"), tc.name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", l.Addr().String(), cfg)
		if err == nil {
			err = c.Handshake()
			c.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("agent dialing the brain as %q: err %v; want success %v", tc.name, err, tc.ok)
		}
	}
}

func TestCertsNeedsABrainName(t *testing.T) {
	err := writeCertSecrets(&bytes.Buffer{}, certOptions{validity: time.Hour}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "--brain-name") {
		t.Errorf("err %v; want one naming --brain-name", err)
	}
}
