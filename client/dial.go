package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/kpng/kpng/backend"

	"github.com/kpng/kpng/internal/tlsfiles"
)

// Option configures a client.
type Option func(*options)

type options struct {
	tls              *tls.Config
	insecure         bool
	serviceProxyName string
	run              backend.Options
	minBackoff       time.Duration
	maxBackoff       time.Duration
	dial             []grpc.DialOption
	onBatch          func(Batch)
	logger           *slog.Logger
}

func buildOptions(opts []Option) options {
	o := options{minBackoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.run.Logger == nil {
		o.run.Logger = o.logger
	}
	return o
}

// WithLogger sets where the client logs (reconnections, and the driver's
// lines unless WithRunOptions sets its own Logger); the default is
// slog.Default(). A line of klog verbosity n is logged at slog.Level(-n).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithTLS secures a tcp:// target (see TLSConfig).
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithInsecure allows a plaintext tcp:// target.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithServiceProxyName asks for the view of the service proxy of that name
// (Services labelled service.kubernetes.io/service-proxy-name with it).
func WithServiceProxyName(name string) Option {
	return func(o *options) { o.serviceProxyName = name }
}

// WithRunOptions sets how Run and RunIncremental drive the handler
// (minimum sync period, resync period, retry).
func WithRunOptions(ro backend.Options) Option { return func(o *options) { o.run = ro } }

// WithBackoff sets the first and the longest wait between reconnection
// attempts (default 100ms and 5s).
func WithBackoff(first, longest time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = first, longest }
}

// WithDialOptions adds gRPC dial options.
func WithDialOptions(d ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, d...) }
}

// Dial returns a connection to a kpng server: target is
// "unix:///path/to.sock", or "tcp://host:port" (or "host:port") secured with
// WithTLS, or plaintext with WithInsecure. The connection is made lazily and
// re-made as needed.
func Dial(target string, opts ...Option) (*grpc.ClientConn, error) {
	o := buildOptions(opts)
	return dial(target, o)
}

func dial(target string, o options) (*grpc.ClientConn, error) {
	dopts := []grpc.DialOption{
		// Notice a server that vanished without closing the connection.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// A full state can be large.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}
	switch {
	case strings.HasPrefix(target, "unix://"):
		// A local socket: its file mode is the access control.
		dopts = append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	default:
		switch {
		case o.tls != nil:
			if o.tls.ServerName == "" {
				// What gRPC would check anyway, set where TLSConfig's
				// own verification (which follows a rotating CA) reads it.
				host, _, err := net.SplitHostPort(strings.TrimPrefix(target, "tcp://"))
				if err != nil {
					return nil, fmt.Errorf("dial %s: %w", target, err)
				}
				o.tls.ServerName = host
			}
			dopts = append(dopts, grpc.WithTransportCredentials(credentials.NewTLS(o.tls)))
		case o.insecure:
			dopts = append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		default:
			return nil, fmt.Errorf("dial %s: TCP needs TLS (WithTLS) or explicitly plaintext (WithInsecure)", target)
		}
	}
	grpcTarget := target
	if !strings.HasPrefix(target, "unix://") {
		grpcTarget = "passthrough:///" + strings.TrimPrefix(target, "tcp://")
	}
	conn, err := grpc.NewClient(grpcTarget, append(dopts, o.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
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
