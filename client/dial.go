package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/kpng/kpng/backend"

	"github.com/kpng/kpng/client/internal/session"
	"github.com/kpng/kpng/internal/tlsfiles"
)

// Option configures a client.
type Option = func(*session.Options)

// WithLogger sets where the client logs (reconnections, and the driver's
// lines unless WithRunOptions sets its own Logger); the default is
// slog.Default(). A line of klog verbosity n is logged at slog.Level(-n).
func WithLogger(l *slog.Logger) Option { return func(o *session.Options) { o.Logger = l } }

// WithTLS secures a tcp:// target (see TLSConfig).
func WithTLS(cfg *tls.Config) Option { return func(o *session.Options) { o.TLS = cfg } }

// WithInsecure allows a plaintext tcp:// target.
func WithInsecure() Option { return func(o *session.Options) { o.Insecure = true } }

// WithServiceProxyName asks for the view of the service proxy of that name
// (Services labelled service.kubernetes.io/service-proxy-name with it).
func WithServiceProxyName(name string) Option {
	return func(o *session.Options) { o.ServiceProxyName = name }
}

// WithRunOptions sets how Run and RunIncremental drive the handler
// (minimum sync period, resync period, retry).
func WithRunOptions(ro backend.Options) Option { return func(o *session.Options) { o.Run = ro } }

// WithBackoff sets the first and the longest wait between reconnection
// attempts (default 100ms and 5s).
func WithBackoff(first, longest time.Duration) Option {
	return func(o *session.Options) { o.MinBackoff, o.MaxBackoff = first, longest }
}

// WithDialOptions adds gRPC dial options.
func WithDialOptions(d ...grpc.DialOption) Option {
	return func(o *session.Options) { o.Dial = append(o.Dial, d...) }
}

// Dial returns a connection to a kpng server: target is
// "unix:///path/to.sock", or "tcp://host:port" (or "host:port") secured with
// WithTLS, or plaintext with WithInsecure. The connection is made lazily and
// re-made as needed.
func Dial(target string, opts ...Option) (*grpc.ClientConn, error) {
	return session.Dial(target, session.Build(opts))
}

// TLSConfig returns the TLS configuration of a client: its certificate and
// key (the server requires one), and the CA that the server's certificate
// must chain to. serverName overrides the name checked in the server's
// certificate ("" means the target's host).
//
// The files are read again at a handshake after they changed, so the
// client certificate and the CA rotate without a restart.
func TLSConfig(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("TLS needs a client certificate, its key, and the server's CA")
	}
	files, err := tlsfiles.Load(certFile, keyFile, caFile)
	if err != nil {
		return nil, fmt.Errorf("loading the client certificate: %w", err)
	}
	return files.ClientConfig(serverName), nil
}
