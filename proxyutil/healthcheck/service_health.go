package healthcheck

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// HealthChecker is what the service health servers ask about the proxy
// itself: a node whose proxy is unhealthy fails every service's check.
// *ProxyHealthServer is one.
type HealthChecker interface {
	Health() ProxyHealth
}

// ServiceOptions configure a [ServiceHealthServer].
type ServiceOptions struct {
	// NodePortAddresses are the CIDRs (or the single word "primary") that
	// select the node addresses to listen on, as kube-proxy's
	// nodePortAddresses. A family with none listens on all its addresses.
	NodePortAddresses []string
	// Proxy, if set, is the proxy's health: while it is unhealthy every
	// check answers 503.
	Proxy HealthChecker
	// OnListenError, if set, is told when a service's health check port
	// cannot be opened (kube-proxy records a FailedToStartServiceHealthcheck
	// event); it is always logged. The port is retried on each Sync.
	OnListenError func(namespace, name string, port int32, err error)
	// InterfaceAddrs lists the host's addresses (nil: net.InterfaceAddrs).
	InterfaceAddrs func() ([]net.Addr, error)
}

// ServiceHealthServer runs one HTTP listener per health check node port:
// a LoadBalancer Service with externalTrafficPolicy Local asks the node, on
// its healthCheckNodePort, whether it has local endpoints, so the load
// balancer sends traffic only to nodes that do.
type ServiceHealthServer struct {
	opts ServiceOptions

	mu       sync.Mutex // held by Sync and Close; handlers never take it
	services map[backend.ServiceKey]*hcInstance
	failed   map[backend.ServiceKey]bool
	addrs    map[localv1.IPFamily][]string // listen IPs per family
	primed   bool
}

type hcInstance struct {
	namespace, name string
	port            int32
	servers         []*http.Server
	endpoints       atomic.Int64
}

// NewServiceHealthServer returns a server with no listener open yet.
func NewServiceHealthServer(opts ServiceOptions) *ServiceHealthServer {
	if opts.InterfaceAddrs == nil {
		opts.InterfaceAddrs = net.InterfaceAddrs
	}
	return &ServiceHealthServer{
		opts:     opts,
		services: map[backend.ServiceKey]*hcInstance{},
		failed:   map[backend.ServiceKey]bool{},
		addrs:    map[localv1.IPFamily][]string{},
	}
}

// OnSync is a backend.Options.OnSync hook: after each successful sync the
// listeners follow the synced state, as kube-proxy updates them after
// writing its rules.
func (s *ServiceHealthServer) OnSync(res backend.SyncResult) {
	if res.Err == nil {
		s.Sync(res.State, res.Changes)
	}
}

// Sync opens, closes and updates listeners for the entries that changed
// (every entry on a Reset), and retries the ports that failed to open.
func (s *ServiceHealthServer) Sync(state *backend.State, ch backend.Changes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	todo := map[backend.ServiceKey]bool{}
	if !s.primed || ch.Reset || ch.NodeChanged {
		for f, reopen := range s.updateAddrs(state.Node) {
			if !reopen {
				continue
			}
			for k, inst := range s.services {
				if k.Family == f {
					inst.close()
					delete(s.services, k)
					todo[k] = true
				}
			}
		}
	}
	if !s.primed || ch.Reset {
		s.primed = true
		for k := range state.Services {
			todo[k] = true
		}
		for k := range s.services {
			todo[k] = true
		}
	}
	for _, k := range ch.Set {
		todo[k] = true
	}
	for _, k := range ch.Deleted {
		todo[k] = true
	}
	for k := range s.failed {
		todo[k] = true
	}
	for k := range todo {
		s.syncOne(k, state.Services[k])
	}
}

func (s *ServiceHealthServer) syncOne(k backend.ServiceKey, se *localv1.ServiceEndpoints) {
	var port int32
	if se != nil {
		port = se.Service.HealthCheckNodePort
	}
	inst := s.services[k]
	if inst != nil && inst.port != port {
		klog.V(2).InfoS("Closing healthcheck", "service", k.String(), "port", inst.port)
		inst.close()
		delete(s.services, k)
		inst = nil
	}
	delete(s.failed, k)
	if port == 0 {
		return
	}
	if inst == nil {
		inst = &hcInstance{namespace: k.Namespace, name: k.Name, port: port}
		klog.V(2).InfoS("Opening healthcheck", "service", k.String(), "port", port)
		if err := s.open(inst, k.Family); err != nil {
			s.failed[k] = true
			klog.ErrorS(err, "Failed to start healthcheck", "service", k.String(), "port", port)
			if s.opts.OnListenError != nil {
				s.opts.OnListenError(k.Namespace, k.Name, port, err)
			}
			return
		}
		s.services[k] = inst
	}
	inst.endpoints.Store(int64(localReadyEndpoints(se)))
}

// localReadyEndpoints counts the distinct IPs of se's ready endpoints on
// this node: terminating endpoints still take traffic, but a node with only
// those should fail the check so that the load balancer drains it.
func localReadyEndpoints(se *localv1.ServiceEndpoints) int {
	var ips []string
	for _, ep := range se.Endpoints {
		if ep.OnThisNode && ep.Ready && !slices.Contains(ips, ep.Ip) {
			ips = append(ips, ep.Ip)
		}
	}
	return len(ips)
}

// open listens on every address of family, or on none if any fails.
func (s *ServiceHealthServer) open(inst *hcInstance, family localv1.IPFamily) error {
	network := "tcp4"
	if family == localv1.IPFamily_IPV6 {
		network = "tcp6"
	}
	for _, ip := range s.addrs[family] {
		addr := net.JoinHostPort(ip, strconv.Itoa(int(inst.port)))
		ln, err := net.Listen(network, addr)
		if err != nil {
			inst.close()
			return fmt.Errorf("service %s/%s health check on %s: %w", inst.namespace, inst.name, addr, err)
		}
		srv := &http.Server{Handler: s.handler(inst), ReadHeaderTimeout: 10 * time.Second}
		inst.servers = append(inst.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "Healthcheck closed", "service", inst.namespace+"/"+inst.name)
			}
		}()
	}
	return nil
}

func (inst *hcInstance) close() {
	for _, srv := range inst.servers {
		_ = srv.Close()
	}
	inst.servers = nil
}

func (s *ServiceHealthServer) handler(inst *hcInstance) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		count := inst.endpoints.Load()
		proxyHealthy := true
		if s.opts.Proxy != nil {
			proxyHealthy = s.opts.Proxy.Health().Healthy
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.FormatInt(count, 10))
		if count != 0 && proxyHealthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		// kube-proxy's exact body, indentation included.
		fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
			inst.namespace, inst.name, count, proxyHealthy)
	})
}

// Close closes every listener.
func (s *ServiceHealthServer) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, inst := range s.services {
		inst.close()
		delete(s.services, k)
	}
	clear(s.failed)
}

// Ports returns the open health check ports by entry, for tests and
// debugging.
func (s *ServiceHealthServer) Ports() map[backend.ServiceKey]int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[backend.ServiceKey]int32, len(s.services))
	for k, inst := range s.services {
		out[k] = inst.port
	}
	return out
}

// updateAddrs recomputes the listen addresses of both families and reports
// which changed.
func (s *ServiceHealthServer) updateAddrs(node *localv1.Node) map[localv1.IPFamily]bool {
	changed := map[localv1.IPFamily]bool{}
	for _, f := range []localv1.IPFamily{localv1.IPFamily_IPV4, localv1.IPFamily_IPV6} {
		ips, err := ListenIPs(f, s.opts.NodePortAddresses, node, s.opts.InterfaceAddrs)
		if err != nil {
			klog.ErrorS(err, "Failed to get node IPs matching nodePortAddresses, health check ports will listen on all addresses", "nodePortAddresses", s.opts.NodePortAddresses)
			ips = []string{wildcard(f)}
		}
		if old, ok := s.addrs[f]; !ok || !slices.Equal(old, ips) {
			changed[f] = ok
			s.addrs[f] = ips
		}
	}
	return changed
}

func wildcard(f localv1.IPFamily) string {
	if f == localv1.IPFamily_IPV6 {
		return "::"
	}
	return "0.0.0.0"
}

// ListenIPs returns the addresses a health check port of family listens
// on, as kube-proxy chooses them: with no nodePortAddresses of the family
// (or a zero CIDR), the family's wildcard address; otherwise the host's
// interface addresses inside those CIDRs (sorted, possibly none). "primary"
// stands for the node's first address of the family, unless it is a
// loopback address.
func ListenIPs(family localv1.IPFamily, nodePortAddresses []string, node *localv1.Node, interfaceAddrs func() ([]net.Addr, error)) ([]string, error) {
	var cidrs []netip.Prefix
	for _, s := range nodePortAddresses {
		if s == "primary" {
			if ip, ok := primaryIP(family, node); ok {
				cidrs = append(cidrs, netip.PrefixFrom(ip, ip.BitLen()))
			}
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("nodePortAddresses: %w", err)
		}
		if p.Addr().Is4() == (family == localv1.IPFamily_IPV4) {
			cidrs = append(cidrs, p.Masked())
		}
	}
	if len(cidrs) == 0 || slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Bits() == 0 }) {
		return []string{wildcard(family)}, nil
	}
	addrs, err := interfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the host's addresses: %w", err)
	}
	var out []string
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		addr = addr.Unmap()
		if slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(addr) }) && !slices.Contains(out, addr.String()) {
			out = append(out, addr.String())
		}
	}
	slices.Sort(out)
	return out, nil
}

func primaryIP(family localv1.IPFamily, node *localv1.Node) (netip.Addr, bool) {
	if node == nil {
		return netip.Addr{}, false
	}
	for _, s := range node.Addresses {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Is4() != (family == localv1.IPFamily_IPV4) {
			continue
		}
		return ip, !ip.IsLoopback()
	}
	return netip.Addr{}, false
}
