package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/internal/testpki"
	"github.com/kpng/kpng/server"
)

// firstBatch opens a localv1 stream and returns the first batch's error.
func firstBatch(addr string, opts ...client.Option) error {
	conn, err := client.Dial(addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := localv1.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&localv1.WatchRequest{NodeName: "node-0"}); err != nil {
		return err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		if m.Ops[len(m.Ops)-1].GetSync() != nil {
			return nil
		}
	}
}

func TestMutualTLS(t *testing.T) {
	ca := testpki.New(t, "kpng-ca")
	srvCert, srvKey := ca.Issue(t, "server", true)
	cliCert, cliKey := ca.Issue(t, "node-0", false)
	rogue := testpki.New(t, "rogue-ca")
	rogueCert, rogueKey := rogue.Issue(t, "node-0", false)

	tlsCfg, err := server.ServerTLS(srvCert, srvKey, ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, newCluster(5, 2), "tcp://127.0.0.1:0", server.Options{}, server.ListenOptions{TLS: tlsCfg})

	good, err := client.TLSConfig(cliCert, cliKey, ca.CertFile(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := firstBatch(ts.addr, client.WithTLS(good)); err != nil {
		t.Fatalf("a client with a valid certificate: %v", err)
	}

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	rogueCfg, err := client.TLSConfig(rogueCert, rogueKey, ca.CertFile(), "")
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]client.Option{
		"no certificate":            client.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		"certificate of another CA": client.WithTLS(rogueCfg),
		"plaintext":                 client.WithInsecure(),
	} {
		err := firstBatch(ts.addr, opt)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: got %v, want the connection refused (Unavailable)", name, err)
		}
	}
}

func TestTCPWithoutTLSNeedsInsecure(t *testing.T) {
	if _, _, err := server.Listen("tcp://127.0.0.1:0", server.ListenOptions{}); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("plaintext TCP without --insecure: %v, want an error naming --insecure", err)
	}
	if _, err := client.Dial("tcp://127.0.0.1:1"); err == nil {
		t.Error("a client dialed plaintext TCP without WithInsecure")
	}
}

func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "kpng.sock")
	lis, _, err := server.Listen("unix://"+path, server.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket of mode 0600", fi.Mode())
	}
	if _, _, err := server.Listen("unix://"+path, server.ListenOptions{}); err == nil {
		t.Error("a second server took over a socket in use")
	}
	lis.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind after Close: %v", err)
	}

	// A stale socket (its server died without removing it) is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	lis, _, err = server.Listen("unix://"+path, server.ListenOptions{SocketMode: 0o660})
	if err != nil {
		t.Fatalf("replacing a stale socket: %v", err)
	}
	defer lis.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v (%v), want 0660", fi.Mode(), err)
	}
	// No other file is left in the directory.
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the socket", len(ents))
	}
}
