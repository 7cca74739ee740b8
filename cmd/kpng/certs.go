package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// certsCommand is `kpng certs`: the CA and certificates of the split
// deployment (deploy/split), as the two Secrets its pods mount.
func certsCommand() *cobra.Command {
	var o certOptions
	cmd := &cobra.Command{
		Use:   "certs --brain-name NAME [--brain-name NAME...]",
		Short: "Create a CA and the brain's and agents' certificates, as the Secrets deploy/split mounts",
		Long: `Create a new CA, a server certificate for the brain (naming every
--brain-name: the DNS names or IP addresses agents dial) and a client
certificate for the agents, and write them as two Secrets (kpng-brain-tls and
kpng-agent-tls, each with tls.crt, tls.key and ca.crt) for kubectl apply -f.

To rotate: run it again and apply; the brain and the agents read the new files
at their next connection, without a restart. (Apply both Secrets together: a
new CA is trusted only by those who have it.)`,
		Example: `  kpng certs --brain-name cp.example.internal --brain-name 192.0.2.10 | kubectl apply -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if o.output != "" && o.output != "-" {
				f, err := os.OpenFile(o.output, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
				if err != nil {
					return err
				}
				defer f.Close()
				out = f
			}
			return writeCertSecrets(out, o, time.Now())
		},
	}
	cmd.Flags().StringSliceVar(&o.brainNames, "brain-name", nil, "a name or IP address the agents dial the brain at (repeat for several)")
	cmd.Flags().StringVar(&o.namespace, "namespace", "kube-system", "the Secrets' namespace")
	cmd.Flags().DurationVar(&o.validity, "validity", 365*24*time.Hour, "how long the certificates are valid")
	cmd.Flags().StringVarP(&o.output, "output", "o", "-", "file to write the Secrets to (mode 0600); - for standard output")
	return cmd
}

type certOptions struct {
	brainNames []string
	namespace  string
	validity   time.Duration
	output     string
}

// writeCertSecrets creates the CA and both certificates, valid from now,
// and writes the Secrets as a YAML stream.
func writeCertSecrets(w io.Writer, o certOptions, now time.Time) error {
	if len(o.brainNames) == 0 {
		return errors.New("--brain-name is required: the name or address agents dial the brain at (its certificate must name it)")
	}
	if o.validity <= 0 {
		return fmt.Errorf("--validity %v: must be positive", o.validity)
	}
	notAfter := now.Add(o.validity)
	caKey, caDER, err := newCert(&x509.Certificate{
		Subject: pkix.Name{CommonName: "kpng CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
	}, nil, nil)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	brain := &x509.Certificate{
		Subject: pkix.Name{CommonName: "kpng-brain"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
	}
	for _, n := range o.brainNames {
		if ip := net.ParseIP(n); ip != nil {
			brain.IPAddresses = append(brain.IPAddresses, ip)
		} else {
			brain.DNSNames = append(brain.DNSNames, n)
		}
	}
	agent := &x509.Certificate{
		Subject: pkix.Name{CommonName: "kpng-agent"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
	}
	caPEM := pemBlock("CERTIFICATE", caDER)
	for i, s := range []struct {
		name string
		tmpl *x509.Certificate
	}{{"kpng-brain-tls", brain}, {"kpng-agent-tls", agent}} {
		key, der, err := newCert(s.tmpl, ca, caKey)
		if err != nil {
			return err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		secret := corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: o.namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "kpng"}},
			Type:       corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey:       pemBlock("CERTIFICATE", der),
				corev1.TLSPrivateKeyKey: pemBlock("EC PRIVATE KEY", kder),
				"ca.crt":                caPEM,
			},
		}
		b, err := yaml.Marshal(secret)
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

// newCert creates a key and a certificate for it from tmpl, signed by
// parent's key (self-signed when parent is nil).
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

func pemBlock(typ string, der []byte) []byte {
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: typ, Bytes: der})
	return b.Bytes()
}
