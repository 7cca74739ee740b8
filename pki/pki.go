// Package pki makes the certificate authority and the certificates of
// kpng's mutual TLS between a brain and its agents (deploy/split), and the
// Secrets that carry them. `kpng certs` is a command around it; tests make
// their certificates with it too (internal/testpki), so what they test is
// what kpng issues.
package pki

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
	"time"
)

// CA is a certificate authority: its certificate and its signing key.
type CA struct {
	// Cert is the CA's certificate, e.g. for an x509.CertPool.
	Cert *x509.Certificate
	// CertPEM is Cert in PEM, as a ca.crt file holds it.
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA makes a CA called name, with a new ECDSA P-256 key, valid from
// notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, der, err := newCert(&x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, NotBefore: notBefore, NotAfter: notAfter,
	}, nil, nil)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("the certificate of %s: %w", name, err)
	}
	return &CA{Cert: cert, CertPEM: PEM("CERTIFICATE", der), key: key}, nil
}

// Request says what certificate to issue.
type Request struct {
	// CommonName is the certificate's subject.
	CommonName string
	// Server: a serving certificate (server auth) naming Hosts; otherwise a
	// client certificate (client auth).
	Server bool
	// Hosts are the DNS names and IP addresses a serving certificate names.
	Hosts []string
}

// KeyPair is an issued certificate and its key, in PEM, as tls.crt and
// tls.key files hold them.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// Issue makes a new ECDSA P-256 key and a certificate for it, signed by the
// CA and valid as long as the CA is.
func (ca *CA) Issue(r Request) (KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: r.CommonName}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore:   ca.Cert.NotBefore, NotAfter: ca.Cert.NotAfter,
	}
	if r.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range r.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	key, der, err := newCert(tmpl, ca.Cert, ca.key)
	if err != nil {
		return KeyPair{}, err
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: PEM("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// NewKey makes an ECDSA P-256 key, e.g. a service account signing key, and
// returns it in PEM.
func NewKey() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return KeyPEM(key)
}

// KeyPEM encodes an ECDSA key as an "EC PRIVATE KEY" PEM block.
func KeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return PEM("EC PRIVATE KEY", der), nil
}

// PEM encodes der as one PEM block of type typ.
func PEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// newCert creates a key and a certificate for it from tmpl, with a random
// serial number, signed by parent's key (self-signed when parent is nil).
func newCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the certificate of %s: %w", tmpl.Subject.CommonName, err)
	}
	return key, der, nil
}
