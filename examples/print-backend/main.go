// Command print-backend is a complete out-of-tree kpng backend: it receives
// a node's view from a kpng server and prints every change, as a dataplane
// would program it. It uses only kpng's public packages.
//
//	kpng kube to-api --listen unix:///tmp/kpng.sock &
//	go run ./examples/print-backend --api unix:///tmp/kpng.sock --node-name node-1
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "print-backend:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("print-backend", flag.ContinueOnError)
	api := fs.String("api", "unix:///run/kpng/kpng.sock", "kpng server: unix:///path or tcp://host:port")
	node := fs.String("node-name", "", "the node whose view to print (required)")
	cert := fs.String("tls-cert", "", "client certificate, for tcp://")
	key := fs.String("tls-key", "", "client certificate's key")
	ca := fs.String("tls-ca", "", "CA of the server's certificate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" {
		return fmt.Errorf("--node-name is required")
	}
	var opts []client.Option
	if *cert != "" {
		tlsCfg, err := client.TLSConfig(*cert, *key, *ca, "")
		if err != nil {
			return err
		}
		opts = append(opts, client.WithTLS(tlsCfg))
	}
	p := &printer{out: out}
	return client.Run(ctx, *api, *node, p.sync, opts...)
}

// printer is the backend: the full-state style, using only the changes.
type printer struct{ out io.Writer }

func (p *printer) sync(_ context.Context, st *backend.State, ch backend.Changes) error {
	fmt.Fprintf(p.out, "# revision %d (%s)\n", st.Revision, ch)
	if ch.NodeChanged && st.Node != nil {
		fmt.Fprintf(p.out, "node %s zone=%q addresses=%v service-cidrs=%v\n", st.Node.Name, st.Node.Zone, st.Node.Addresses, st.ServiceCIDRs)
	}
	for _, k := range ch.Deleted {
		fmt.Fprintf(p.out, "delete %s\n", k)
	}
	set := ch.Set
	if ch.Reset { // everything is new: the whole state, not a change list
		set = nil
		for _, se := range st.Sorted() {
			set = append(set, backend.KeyOf(se))
		}
	}
	for _, k := range set {
		se := st.Services[k]
		svc := se.Service
		for _, port := range svc.Ports {
			fmt.Fprintf(p.out, "set %s %s %s", k, strings.ToLower(port.Protocol.String()), hostPort(svc.ClusterIp, port.Port))
			if port.NodePort != 0 {
				fmt.Fprintf(p.out, " nodePort=%d", port.NodePort)
			}
			if !port.HasEndpoints {
				fmt.Fprint(p.out, " REJECT")
			}
			fmt.Fprintf(p.out, " ->%s\n", targets(se, port, svc.InternalTrafficPolicy))
		}
	}
	return nil
}

// targets lists the endpoints that cluster-IP traffic to a port goes to:
// the local set under the Local policy, the cluster set otherwise.
func targets(se *localv1.ServiceEndpoints, port *localv1.ServicePort, policy localv1.TrafficPolicy) string {
	var b strings.Builder
	for _, ep := range se.Endpoints {
		if ep.PortName != port.Name || ep.Protocol != port.Protocol {
			continue
		}
		if (policy == localv1.TrafficPolicy_LOCAL && ep.InLocalSet) || (policy == localv1.TrafficPolicy_CLUSTER && ep.InClusterSet) {
			fmt.Fprintf(&b, " %s", hostPort(ep.Ip, ep.Port))
		}
	}
	if b.Len() == 0 {
		return " (drop)"
	}
	return b.String()
}

// hostPort is "ip:port", with an IPv6 address in brackets.
func hostPort(ip string, port int32) string { return net.JoinHostPort(ip, strconv.Itoa(int(port))) }
