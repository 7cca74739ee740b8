package apiserver

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kpng/kpng/internal/testpki"
	"github.com/kpng/kpng/pki"
)

// credentials are the files kube-apiserver is started with, and what a
// client needs to trust it.
type credentials struct {
	caPEM []byte // the CA that signed the serving certificate

	servingCertFile string // serving certificate for 127.0.0.1 and localhost
	servingKeyFile  string
	saKeyFile       string // service account token signing key
	tokenFile       string // static tokens: the admin's
	adminToken      string
}

// writeCredentials generates a CA, a serving certificate, a service account
// signing key and an admin token, and writes them under dir. ECDSA P-256
// keys keep this to a few milliseconds. They are valid for a day: a
// benchmark's API server may run for hours.
func writeCredentials(dir string) (*credentials, error) {
	ca, err := testpki.NewCA(dir, "kpng-test-ca", 24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	c := &credentials{
		caPEM:     ca.CertPEM(),
		saKeyFile: filepath.Join(dir, "service-account.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	c.servingCertFile, c.servingKeyFile, err = ca.IssueFiles("serving", pki.Request{
		CommonName: "kube-apiserver", Server: true, Hosts: []string{"127.0.0.1", "localhost"},
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	saKey, err := pki.NewKey()
	if err != nil {
		return nil, fmt.Errorf("generating service account key: %w", err)
	}
	if err := os.WriteFile(c.saKeyFile, saKey, 0o600); err != nil {
		return nil, fmt.Errorf("writing service account key: %w", err)
	}

	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("generating admin token: %w", err)
	}
	c.adminToken = fmt.Sprintf("%x", token)
	// token,user,uid,"group,..." — system:masters is bound to cluster-admin
	// and bypasses authorization.
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", c.adminToken, AdminUser, AdminUser)
	if err := os.WriteFile(c.tokenFile, []byte(line), 0o600); err != nil {
		return nil, fmt.Errorf("writing token file: %w", err)
	}
	return c, nil
}
