package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
	"github.com/kpng/kpng/server/brainstatus"
)

// defaultSocket is where to-api listens and clients connect by default.
const defaultSocket = "unix:///run/kpng/kpng.sock"

// toAPICommand is the sink that serves the cluster over gRPC: the localv1
// view of any node that asks, and the globalv1 cluster state.
func toAPICommand(source sourceFactory) *cobra.Command {
	var (
		listen, socketMode           string
		tlsCert, tlsKey, tlsClientCA string
		insecure                     bool
		opts                         server.Options
		proxyName                    string
		statusAddr                   string
	)
	cmd := &cobra.Command{
		Use:   "to-api",
		Short: "Serve node views (localv1) and the cluster state (globalv1) over gRPC",
		Long: `Serve the localv1 Watch API (each client names its node and receives that
node's view, computed here) and the globalv1 Watch API (the cluster state, for
node agents: kpng api --api ...).

A unix socket is created with mode --socket-mode (0600: root only). TCP needs
TLS with client certificates (--tls-cert, --tls-key, --tls-client-ca), or an
explicit --insecure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := strconv.ParseUint(socketMode, 8, 32)
			if err != nil {
				return fmt.Errorf("--socket-mode %q: %w", socketMode, err)
			}
			lopts := server.ListenOptions{SocketMode: os.FileMode(mode), Insecure: insecure}
			if tlsCert != "" || tlsKey != "" || tlsClientCA != "" {
				if lopts.TLS, err = server.ServerTLS(tlsCert, tlsKey, tlsClientCA); err != nil {
					return fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
				}
			}
			src, err := source(sourceOptions{ServiceProxyName: proxyName}) // every node
			if err != nil {
				return err
			}
			lis, gopts, err := server.Listen(listen, lopts)
			if err != nil {
				return err
			}
			defer lis.Close()
			var statusLis net.Listener
			if statusAddr != "" {
				if statusLis, err = net.Listen("tcp", statusAddr); err != nil {
					return fmt.Errorf("--metrics-bind-address: %w", err)
				}
				defer statusLis.Close()
			}
			return cluster.Run(cmd.Context(), src, cluster.StageFunc(func(ctx context.Context, store *cluster.Store) error {
				srv := server.New(store, opts)
				status := brainstatus.New(store, src, srv.GlobalRevision)
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				var wg sync.WaitGroup
				defer wg.Wait()
				wg.Add(1)
				go func() { defer wg.Done(); status.WatchStore(ctx) }()
				statusErr := make(chan error, 1)
				if statusLis != nil {
					klog.FromContext(ctx).Info("Serving /healthz, /readyz and /metrics", "address", statusLis.Addr().String())
					wg.Add(1)
					go func() { defer wg.Done(); statusErr <- status.Serve(ctx, statusLis) }()
				}
				err := srv.Serve(ctx, lis, append(gopts, grpc.StatsHandler(status.StatsHandler()))...)
				cancel()
				if statusLis != nil {
					if serr := <-statusErr; err == nil && serr != nil {
						err = fmt.Errorf("status server: %w", serr)
					}
				}
				return err
			}))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", defaultSocket, "address to serve: unix:///path or tcp://host:port")
	fs.StringVar(&socketMode, "socket-mode", "0600", "permissions of the unix socket (octal)")
	fs.StringVar(&tlsCert, "tls-cert", "", "server certificate (PEM), for tcp://")
	fs.StringVar(&tlsKey, "tls-key", "", "server certificate's key (PEM)")
	fs.StringVar(&tlsClientCA, "tls-client-ca", "", "CA that client certificates must chain to (PEM)")
	fs.BoolVar(&insecure, "insecure", false, "allow plaintext TCP: anyone reaching the port reads the cluster")
	fs.StringVar(&proxyName, "service-proxy-name", "",
		"also serve Services labelled service.kubernetes.io/service-proxy-name with this value (to clients asking for it)")
	fs.StringVar(&statusAddr, "metrics-bind-address", "",
		"host:port to serve /healthz, /readyz (the cluster state is complete and the API server answers) and /metrics on; empty: none")
	fs.IntVar(&opts.HistorySize, "history-size", server.DefaultHistorySize,
		"changed keys remembered per view, so that a client reconnecting gets only the diff")
	fs.IntVar(&opts.MaxNodeViews, "max-node-views", server.DefaultMaxNodeViews,
		"node views computed here for localv1 clients (each holds the node's whole view, ~2.3 MiB per 1,000 Services); "+
			"at the bound an unwatched view makes room, else a client asking for one more node is refused")
	return cmd
}

// apiFlags are the flags of a command that connects to a kpng server. They
// all start with "api" so that a chain (kpng api ... to-api) can set both
// ends.
type apiFlags struct {
	target                 string
	tlsCert, tlsKey, tlsCA string
	tlsServerName          string
	insecure               bool
}

func (a *apiFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&a.target, "api", defaultSocket, "kpng server: unix:///path or tcp://host:port")
	fs.StringVar(&a.tlsCert, "api-tls-cert", "", "client certificate (PEM), for tcp://")
	fs.StringVar(&a.tlsKey, "api-tls-key", "", "client certificate's key (PEM)")
	fs.StringVar(&a.tlsCA, "api-tls-ca", "", "CA that the server's certificate must chain to (PEM)")
	fs.StringVar(&a.tlsServerName, "api-tls-server-name", "", "name to check in the server's certificate (default: the host in --api)")
	fs.BoolVar(&a.insecure, "api-insecure", false, "allow plaintext TCP to --api")
}

func (a *apiFlags) options() ([]client.Option, error) {
	var opts []client.Option
	secured := a.tlsCert != "" || a.tlsKey != "" || a.tlsCA != ""
	if secured {
		cfg, err := client.TLSConfig(a.tlsCert, a.tlsKey, a.tlsCA, a.tlsServerName)
		if err != nil {
			return nil, fmt.Errorf("--api-tls-cert, --api-tls-key, --api-tls-ca: %w", err)
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	if a.insecure {
		opts = append(opts, client.WithInsecure())
	}
	if !strings.HasPrefix(a.target, "unix://") && !secured && !a.insecure {
		return nil, fmt.Errorf("--api %s: TCP needs TLS (--api-tls-cert, --api-tls-key, --api-tls-ca) or an explicit --api-insecure", a.target)
	}
	return opts, nil
}
