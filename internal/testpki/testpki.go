// Package testpki makes certificate authorities and the certificates they
// sign, as files, for tests of kpng's TLS (mutual TLS between a brain and
// its clients, the test API server's serving certificate). The certificates
// are those kpng issues (package pki); this package only writes them to
// files.
package testpki

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kpng/kpng/pki"
)

// CA is a certificate authority whose files are in a folder of its own.
type CA struct {
	dir string
	// Cert is the CA's certificate, e.g. for an x509.CertPool.
	Cert *x509.Certificate
	ca   *pki.CA
}

// New makes a CA called name, valid for an hour around now, in a temporary
// folder of the test, and writes its certificate (CertFile).
func New(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := NewCA(t.TempDir(), name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// NewCA makes a CA called name, valid from an hour ago (clock skew) to
// validity from now, and writes its certificate to dir (CertFile).
func NewCA(dir, name string, validity time.Duration) (*CA, error) {
	now := time.Now()
	ca, err := pki.NewCA(name, now.Add(-time.Hour), now.Add(validity))
	if err != nil {
		return nil, err
	}
	c := &CA{dir: dir, Cert: ca.Cert, ca: ca}
	if err := write(c.CertFile(), ca.CertPEM); err != nil {
		return nil, err
	}
	return c, nil
}

// CertFile is the path of the CA's certificate (PEM).
func (ca *CA) CertFile() string { return filepath.Join(ca.dir, "ca.crt") }

// CertPEM is the CA's certificate (PEM), e.g. for a kubeconfig.
func (ca *CA) CertPEM() []byte { return ca.ca.CertPEM }

// Issue writes a certificate and key for name (name.crt and name.key beside
// the CA's) and returns their paths: a server certificate for 127.0.0.1, or
// a client certificate.
func (ca *CA) Issue(t testing.TB, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	req := pki.Request{CommonName: name, Server: server}
	if server {
		req.Hosts = []string{"127.0.0.1"}
	}
	certFile, keyFile, err := ca.IssueFiles(name, req)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// IssueFiles issues the certificate req asks for and writes it and its key
// as name.crt and name.key beside the CA's, returning their paths.
func (ca *CA) IssueFiles(name string, req pki.Request) (certFile, keyFile string, err error) {
	kp, err := ca.ca.Issue(req)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
	if err := write(certFile, kp.CertPEM); err != nil {
		return "", "", err
	}
	if err := write(keyFile, kp.KeyPEM); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func write(path string, pem []byte) error {
	if err := os.WriteFile(path, pem, 0o600); err != nil {
		return fmt.Errorf("testpki: %w", err)
	}
	return nil
}
