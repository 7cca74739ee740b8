package pki

import (
	"crypto/tls"
	"crypto/x509"
	"slices"
	"testing"
	"time"
)

// TestIssue: a serving certificate names its hosts, IP or DNS, and is for
// server auth; a client certificate names none and is for client auth;
// both verify against their CA and pair with their key.
func TestIssue(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test CA", now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tc := range []struct {
		name    string
		req     Request
		usage   x509.ExtKeyUsage
		dnsName string // a name Verify must accept ("" for none)
	}{
		{"server by IP and name", Request{CommonName: "s", Server: true, Hosts: []string{"127.0.0.1", "brain.example"}}, x509.ExtKeyUsageServerAuth, "brain.example"},
		{"client", Request{CommonName: "c", Hosts: []string{"ignored.example"}}, x509.ExtKeyUsageClientAuth, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kp, err := ca.Issue(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.dnsName, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
				t.Errorf("verify: %v", err)
			}
			if tc.req.Server && (len(cert.IPAddresses) != 1 || !slices.Equal(cert.DNSNames, []string{"brain.example"})) {
				t.Errorf("names: IPs %v, DNS %v", cert.IPAddresses, cert.DNSNames)
			}
			if !tc.req.Server && (len(cert.IPAddresses)+len(cert.DNSNames) != 0) {
				t.Errorf("a client certificate names hosts: %v %v", cert.IPAddresses, cert.DNSNames)
			}
			if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
				t.Errorf("valid until %v; want the CA's %v", cert.NotAfter, ca.Cert.NotAfter)
			}
		})
	}
}

func TestSplitSecretsNeedsABrainName(t *testing.T) {
	if _, err := SplitSecrets(nil, "kube-system", time.Hour, time.Now()); err == nil {
		t.Error("no error without a brain name")
	}
	if _, err := SplitSecrets([]string{"b"}, "kube-system", 0, time.Now()); err == nil {
		t.Error("no error with a zero validity")
	}
}
