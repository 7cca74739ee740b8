// Package tlsfiles serves TLS certificates from files that may change while
// the process runs: a Kubernetes Secret volume swaps its files (through its
// ..data symlink) when the Secret is updated, and cert-manager or an
// operator rotates certificates that way. Every handshake checks whether
// the files changed (a stat each, no read) and reloads them if so; a
// reload that fails (a half-written pair) keeps the previous pair and is
// retried at the next handshake, so rotation never needs a restart and
// never breaks serving.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Files are a certificate, its key and a CA bundle, reloaded when any of
// them changes.
type Files struct {
	CertFile, KeyFile, CAFile string

	mu    sync.Mutex
	stamp string
	cert  *tls.Certificate
	pool  *x509.CertPool
}

// Load reads the files the first time: an error here is a configuration
// error to report at start-up.
func Load(certFile, keyFile, caFile string) (*Files, error) {
	f := &Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}
	if _, _, err := f.current(); err != nil {
		return nil, err
	}
	return f, nil
}

// stampOf identifies the files' current versions: path, size, mtime and
// inode of each (following symlinks, as a Secret volume's are).
func (f *Files) stampOf() (string, error) {
	s := ""
	for _, p := range []string{f.CertFile, f.KeyFile, f.CAFile} {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%s:%d:%d:%v;", p, st.Size(), st.ModTime().UnixNano(), inode(st))
	}
	return s, nil
}

// current returns the pair and the CA pool, reloading them if the files
// changed. When a reload fails and a previous pair exists, it keeps that.
func (f *Files) current() (*tls.Certificate, *x509.CertPool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stamp, err := f.stampOf()
	if err == nil && stamp == f.stamp {
		return f.cert, f.pool, nil
	}
	if err == nil {
		var cert tls.Certificate
		var pool *x509.CertPool
		cert, err = tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err == nil {
			pool, err = loadPool(f.CAFile)
		}
		if err == nil {
			f.stamp, f.cert, f.pool = stamp, &cert, pool
			return f.cert, f.pool, nil
		}
	}
	if f.cert != nil {
		return f.cert, f.pool, nil // keep serving with the last good pair
	}
	return nil, nil, err
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading CA %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA %s: no PEM certificate", file)
	}
	return pool, nil
}

// ServerConfig is the TLS configuration of a server that requires client
// certificates chaining to the CA: certificate and CA are the files'
// current ones at each handshake.
func (f *Files) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool, err := f.current()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				MinVersion:   tls.VersionTLS12,
			}, nil
		},
	}
}

// ClientConfig is the TLS configuration of a client that presents the
// files' certificate and accepts only a server whose certificate chains
// to the files' CA and names the returned configuration's ServerName (set
// it before the first handshake when serverName is empty). Certificate and
// CA are the files' current ones at each handshake.
func (f *Files) ClientConfig(serverName string) *tls.Config {
	var cfg *tls.Config
	cfg = &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _, err := f.current()
			return cert, err
		},
		// The CA may rotate, so the chain is checked here against the
		// current pool rather than by a fixed RootCAs: the standard check
		// is off only to be done in VerifyConnection, in full.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool, err := f.current()
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			// This configuration's name (a clone made for the handshake
			// carries its own copy of it, which the check cannot see).
			name := cfg.ServerName
			if name == "" {
				return errors.New("no server name to check the server's certificate against")
			}
			_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: pool, Intermediates: inter, DNSName: name,
				CurrentTime: time.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if err != nil {
				return fmt.Errorf("the server's certificate: %w", err)
			}
			return nil
		},
	}
	return cfg
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}
