package session

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// Options are a client's options (client.Option sets them).
type Options struct {
	TLS              *tls.Config
	Insecure         bool
	ServiceProxyName string
	Run              backend.Options
	MinBackoff       time.Duration
	MaxBackoff       time.Duration
	Dial             []grpc.DialOption
	OnBatch          func(Batch[*localv1.Op])
	Logger           *slog.Logger
}

// Build applies opts to the defaults: reconnections after 100 ms, backing
// off to 5 s; logs to slog.Default(), the driver's too unless Run says.
func Build(opts []func(*Options)) Options {
	o := Options{MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Run.Logger == nil {
		o.Run.Logger = o.Logger
	}
	return o
}

// Dial returns a connection to a kpng server (see client.Dial).
func Dial(target string, o Options) (*grpc.ClientConn, error) {
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
		case o.TLS != nil:
			if o.TLS.ServerName == "" {
				// What gRPC would check anyway, set where TLSConfig's
				// own verification (which follows a rotating CA) reads it.
				host, _, err := net.SplitHostPort(strings.TrimPrefix(target, "tcp://"))
				if err != nil {
					return nil, fmt.Errorf("dial %s: %w", target, err)
				}
				o.TLS.ServerName = host
			}
			dopts = append(dopts, grpc.WithTransportCredentials(credentials.NewTLS(o.TLS)))
		case o.Insecure:
			dopts = append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		default:
			return nil, fmt.Errorf("dial %s: TCP needs TLS (WithTLS) or explicitly plaintext (WithInsecure)", target)
		}
	}
	grpcTarget := target
	if !strings.HasPrefix(target, "unix://") {
		grpcTarget = "passthrough:///" + strings.TrimPrefix(target, "tcp://")
	}
	conn, err := grpc.NewClient(grpcTarget, append(dopts, o.Dial...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}
