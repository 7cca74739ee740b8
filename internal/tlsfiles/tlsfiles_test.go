package tlsfiles

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpng/kpng/internal/testpki"
)

// live is a folder whose files are replaced the way a Secret volume's are:
// a whole new file renamed over the old one.
type live struct{ dir string }

func (l live) path(name string) string { return filepath.Join(l.dir, name) }

func (l live) put(t *testing.T, name, from string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := l.path("." + name + ".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, l.path(name)); err != nil {
		t.Fatal(err)
	}
}

// handshake connects client to server over loopback and returns the
// common name of the certificate each side saw, or the client's error.
func handshake(t *testing.T, server, client *tls.Config) (serverSaw, clientSaw string, err error) {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- ""
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if tc.Handshake() != nil || len(tc.ConnectionState().PeerCertificates) == 0 {
			got <- ""
			return
		}
		got <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}()
	client.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", l.Addr().String(), client)
	if err != nil {
		<-got
		return "", "", err
	}
	defer c.Close()
	clientSaw = c.ConnectionState().PeerCertificates[0].Subject.CommonName
	return <-got, clientSaw, nil
}

// TestRotation: certificates and CAs are replaced on disk while server and
// client keep their configurations; each new handshake uses the files as
// they are, and a client refuses a server its CA did not sign.
func TestRotation(t *testing.T) {
	ca1, ca2 := testpki.New(t, "ca1"), testpki.New(t, "ca2")
	srv, cli := live{t.TempDir()}, live{t.TempDir()}
	issue := func(ca *testpki.CA, name string, server bool, to live) {
		c, k := ca.Issue(t, name, server)
		to.put(t, "tls.crt", c)
		to.put(t, "tls.key", k)
		to.put(t, "ca.crt", ca.CertFile())
	}
	issue(ca1, "brain-1", true, srv)
	issue(ca1, "agent-1", false, cli)
	sf, err := Load(srv.path("tls.crt"), srv.path("tls.key"), srv.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := Load(cli.path("tls.crt"), cli.path("tls.key"), cli.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	server, client := sf.ServerConfig(), cf.ClientConfig("")
	expect := func(wantServerSaw, wantClientSaw string) {
		t.Helper()
		s, c, err := handshake(t, server, client)
		if err != nil || s != wantServerSaw || c != wantClientSaw {
			t.Fatalf("server saw %q, client saw %q, err %v; want %q and %q", s, c, err, wantServerSaw, wantClientSaw)
		}
	}
	expect("agent-1", "brain-1")

	// A new server certificate from the same CA.
	issue(ca1, "brain-2", true, srv)
	expect("agent-1", "brain-2")

	// Both sides move to a new CA.
	issue(ca2, "brain-3", true, srv)
	issue(ca2, "agent-2", false, cli)
	expect("agent-2", "brain-3")

	// A client that still trusts only the old CA refuses the server.
	old := live{t.TempDir()}
	issue(ca1, "agent-old", false, old)
	of, err := Load(old.path("tls.crt"), old.path("tls.key"), old.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := handshake(t, server, of.ClientConfig("")); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting another CA: err %v; want its refusal of the server's certificate", err)
	}

	// A half-written pair (a key that does not match) keeps the last good one.
	other, _ := ca2.Issue(t, "brain-4", true)
	srv.put(t, "tls.crt", other)
	expect("agent-2", "brain-3")
}

// TestLoadErrors: missing or broken files are errors at start-up.
func TestLoadErrors(t *testing.T) {
	ca := testpki.New(t, "ca")
	c, k := ca.Issue(t, "x", true)
	for name, files := range map[string][3]string{
		"missing key":   {c, filepath.Join(t.TempDir(), "nope"), ca.CertFile()},
		"CA not PEM":    {c, k, c + ".nope"},
		"key as the CA": {c, k, k},
	} {
		if _, err := Load(files[0], files[1], files[2]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
