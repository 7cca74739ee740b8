package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/internal/testpki"
)

// freeAddress returns a loopback TCP address nobody listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// apiToFile runs `kpng api --api target ARGS to-file --node-name node-1`
// and returns the view it wrote.
func apiToFile(t *testing.T, target string, args ...string) (string, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "view.yaml")
	args = append(append([]string{"api", "--api", target}, args...), "to-file", "--node-name", "node-1", "--output", out)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := execute(ctx, t, args...); err != nil {
		return "", err
	}
	got, err := os.ReadFile(out)
	return string(got), err
}

// firstBatchError opens a localv1 watch and returns how the first batch
// ended: nil when it arrived.
func firstBatchError(target string, opts ...client.Option) error {
	conn, err := client.Dial(target, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := localv1.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&localv1.WatchRequest{NodeName: "node-1"}); err != nil {
		return err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		if len(m.Ops) > 0 && m.Ops[len(m.Ops)-1].GetSync() != nil {
			return nil
		}
	}
}

// The TLS flags, through the real commands: to-api over TCP with mutual
// TLS, served to `kpng api` (globalv1) and `kpng local` (localv1) with
// their --api-tls-* flags; a client without a certificate is refused in
// the handshake; incomplete TLS flags are errors naming the flags.
func TestAPICommandsOverMutualTLS(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "cluster-node-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ca := testpki.New(t, "kpng-test-ca")
	srvCert, srvKey := ca.Issue(t, "server", true)
	cliCert, cliKey := ca.Issue(t, "node-1", false)
	addr := freeAddress(t)
	target := "tcp://" + addr
	start(t, "file", "--input", "../../examples/cluster.yaml", "to-api", "--listen", target,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", ca.CertFile())
	clientTLS := []string{"--api-tls-cert", cliCert, "--api-tls-key", cliKey, "--api-tls-ca", ca.CertFile()}

	// Clients retry until the server listens: no wait needed.
	got, err := apiToFile(t, target, clientTLS...)
	if err != nil {
		t.Fatalf("kpng api --api %s --api-tls-* ... to-file: %v", target, err)
	}
	if got != string(golden) {
		t.Errorf("kpng api over mutual TLS differs from kpng file ... to-file:\n%s", got)
	}

	for len(views) > 0 { // states of other tests' backends
		<-views
	}
	start(t, append(append([]string{"local", "--api", target}, clientTLS...), "--node-name", "node-1", "to-test-view")...)
	select {
	case got := <-views:
		if string(got) != string(golden) {
			t.Errorf("kpng local over mutual TLS got another view than kpng file ... to-file:\n%s", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("kpng local over mutual TLS: no view within a minute")
	}

	// A client without a certificate: the server's handshake refuses it.
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	noCert := client.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err := firstBatchError(target, noCert); status.Code(err) != codes.Unavailable {
		t.Errorf("a client without a certificate: %v, want the connection refused (Unavailable)", err)
	}
	// A plaintext client of the TLS server.
	if err := firstBatchError(target, client.WithInsecure()); status.Code(err) != codes.Unavailable {
		t.Errorf("a plaintext client of a TLS server: %v, want the connection refused (Unavailable)", err)
	}

	// Incomplete TLS flags, on either end.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a client CA without a client certificate", []string{"api", "--api", target, "--api-tls-ca", ca.CertFile(), "to-file", "--node-name", "node-1"}, "--api-tls-cert"},
		{"a server certificate without a client CA", []string{"file", "--input", "../../examples/cluster.yaml", "to-api", "--listen", "tcp://" + freeAddress(t),
			"--tls-cert", srvCert, "--tls-key", srvKey}, "--tls-client-ca"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := execute(ctx, t, tc.args...)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// Plaintext TCP needs --insecure on the server and --api-insecure on the
// client; with both, it works.
func TestAPICommandsPlaintextTCPNeedsInsecure(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "cluster-node-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	target := "tcp://" + freeAddress(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = execute(ctx, t, "file", "--input", "../../examples/cluster.yaml", "to-api", "--listen", target)
	if err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("to-api --listen %s without TLS nor --insecure: %v, want an error naming --insecure", target, err)
	}

	start(t, "file", "--input", "../../examples/cluster.yaml", "to-api", "--listen", target, "--insecure")
	for _, cmd := range []string{"api", "local"} {
		args := []string{cmd, "--api", target, "--node-name", "node-1", "to-test-view"}
		if cmd == "api" {
			args = []string{cmd, "--api", target, "to-file", "--node-name", "node-1"}
		}
		err := execute(ctx, t, args...)
		if err == nil || !strings.Contains(err.Error(), "--api-insecure") {
			t.Errorf("kpng %s --api %s without TLS nor --api-insecure: %v, want an error naming --api-insecure", cmd, target, err)
		}
	}
	got, err := apiToFile(t, target, "--api-insecure")
	if err != nil {
		t.Fatalf("kpng api --api %s --api-insecure: %v", target, err)
	}
	if got != string(golden) {
		t.Errorf("kpng api over plaintext TCP differs from kpng file ... to-file:\n%s", got)
	}
}
