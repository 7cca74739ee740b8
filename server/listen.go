package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kpng/kpng/internal/tlsfiles"
)

// ListenOptions say how to secure a listening address.
type ListenOptions struct {
	// SocketMode is the permission of a unix socket. Zero means 0600: only
	// the socket's owner (root, for kpng) may connect.
	SocketMode os.FileMode
	// TLS secures a tcp:// address; see ServerTLS. Required for TCP unless
	// Insecure is set.
	TLS *tls.Config
	// Insecure allows plaintext TCP: anyone who can reach the port reads
	// every node's view.
	Insecure bool
}

// Listen opens addr: "unix:///path/to.sock" (the socket is created with
// SocketMode; a stale socket at the path is replaced) or "tcp://host:port"
// (TLS, or plaintext with Insecure). It returns the listener and the gRPC
// server options that go with it.
func Listen(addr string, opts ListenOptions) (net.Listener, []grpc.ServerOption, error) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		path := strings.TrimPrefix(addr, "unix://")
		if path == "" {
			return nil, nil, fmt.Errorf("listen %q: no socket path", addr)
		}
		mode := opts.SocketMode
		if mode == 0 {
			mode = 0o600
		}
		lis, err := listenUnix(path, mode)
		if err != nil {
			return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		return lis, nil, nil
	case strings.HasPrefix(addr, "tcp://"):
		hostport := strings.TrimPrefix(addr, "tcp://")
		var sopts []grpc.ServerOption
		switch {
		case opts.TLS != nil:
			sopts = append(sopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
		case !opts.Insecure:
			return nil, nil, fmt.Errorf("listen %s: TCP needs TLS (--tls-cert, --tls-key, --tls-client-ca) or an explicit --insecure", addr)
		}
		lis, err := net.Listen("tcp", hostport)
		if err != nil {
			return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		return lis, sopts, nil
	default:
		return nil, nil, fmt.Errorf("listen %q: want unix:///path or tcp://host:port", addr)
	}
}

// listenUnix creates the socket in a private directory, sets its mode, and
// only then moves it to path: no client can connect in between, whatever
// the umask.
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by another server", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp(dir, ".kpng-socket-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	tmpPath := filepath.Join(tmp, "s")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmpPath, Net: "unix"})
	if err != nil {
		return nil, err
	}
	lis.SetUnlinkOnClose(false)
	if err := os.Chmod(tmpPath, mode); err != nil {
		lis.Close()
		return nil, err
	}
	if err := os.Rename(tmpPath, path); err != nil {
		lis.Close()
		return nil, err
	}
	return &unixListener{UnixListener: lis, path: path}, nil
}

// unixListener removes its socket when closed.
type unixListener struct {
	*net.UnixListener
	path string
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if rmErr := os.Remove(l.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
		err = rmErr
	}
	return err
}

// Addr reports the socket's final path.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// ServerTLS returns the TLS configuration of a TCP server: its certificate
// and key, and the CA that client certificates must chain to (a client
// without a valid certificate is refused during the handshake). The files
// are read again at a handshake after they changed, so certificates and CA
// rotate without a restart (a Secret volume's update, say).
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || clientCAFile == "" {
		return nil, errors.New("TLS needs a certificate, its key, and a client CA")
	}
	files, err := tlsfiles.Load(certFile, keyFile, clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("loading the server certificate: %w", err)
	}
	return files.ServerConfig(), nil
}
