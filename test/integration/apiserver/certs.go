package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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
// keys keep this to a few milliseconds.
func writeCredentials(dir string) (*credentials, error) {
	c := &credentials{
		servingCertFile: filepath.Join(dir, "serving.crt"),
		servingKeyFile:  filepath.Join(dir, "serving.key"),
		saKeyFile:       filepath.Join(dir, "service-account.key"),
		tokenFile:       filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kpng-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating serving key: %w", err)
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}, ca, servingKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("creating serving certificate: %w", err)
	}
	if err := os.WriteFile(c.servingCertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servingDER}), 0o600); err != nil {
		return nil, fmt.Errorf("writing serving certificate: %w", err)
	}
	if err := writeKey(c.servingKeyFile, servingKey); err != nil {
		return nil, fmt.Errorf("writing serving key: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating service account key: %w", err)
	}
	if err := writeKey(c.saKeyFile, saKey); err != nil {
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

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}
