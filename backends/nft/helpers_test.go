package nft

import (
	"context"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// testNode is the node every test runs on.
var testNode = &localv1.Node{Name: "node-a", Addresses: []string{"192.168.0.10", "fd00::10"}, PodCidrs: []string{"10.0.1.0/24", "fd01:1::/64"}}

// fixture is a backend on two fake tables, with a clock the test moves.
type fixture struct {
	t      *testing.T
	b      *Backend
	fake4  *knftables.Fake
	fake6  *knftables.Fake
	state  *backend.State
	clock  time.Time
	synced bool
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: time.Unix(1_000_000, 0)}
	f.fake4 = knftables.NewFake(knftables.IPv4Family, cfg.Table)
	f.fake6 = knftables.NewFake(knftables.IPv6Family, cfg.Table)
	t4, t6 := newTable(ipv4, f.fake4, fakeReader(f.fake4)), newTable(ipv6, f.fake6, fakeReader(f.fake6))
	t4.count, t6.count = fakeCounter(f.fake4), fakeCounter(f.fake6)
	f.b = NewBackend(cfg, t4, t6)
	f.b.now = func() time.Time { return f.clock }
	f.b.interfaceAddrs = func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("172.16.0.10"), netip.MustParseAddr("fd00::10")}, nil
	}
	f.state = backend.NewState("node-a")
	f.state.Node = testNode
	f.state.ServiceCIDRs = []string{"10.96.0.0/16", "fd00:96::/112"}
	return f
}

func testConfig() Config {
	c := DefaultConfig()
	c.ClusterCIDRs = []string{"10.0.0.0/16", "fd01::/48"}
	return c
}

// sync runs one Sync with the given changes, failing the test on error.
func (f *fixture) sync(ch backend.Changes) {
	f.t.Helper()
	if !f.synced {
		ch.Reset = true
	}
	if err := f.b.Sync(context.Background(), f.state, ch); err != nil {
		f.t.Fatalf("Sync(%v): %v", ch, err)
	}
	f.synced = true
}

// set puts services in the state and syncs them as changed.
func (f *fixture) set(ses ...*localv1.ServiceEndpoints) {
	f.t.Helper()
	var ch backend.Changes
	for _, se := range ses {
		k := backend.KeyOf(se)
		f.state.Services[k] = se
		ch.Set = append(ch.Set, k)
	}
	f.sync(ch)
}

// del removes services from the state and syncs.
func (f *fixture) del(keys ...backend.ServiceKey) {
	f.t.Helper()
	for _, k := range keys {
		delete(f.state.Services, k)
	}
	f.sync(backend.Changes{Deleted: keys})
}

var stamp = regexp.MustCompile(` ?#[A-Z2-7]{12}`)

// dump is a fake table's content, without the chain hashes (noise to a
// reader).
func dump(fake *knftables.Fake) string {
	d := stamp.ReplaceAllString(fake.Dump(), "")
	return strings.ReplaceAll(d, ` comment ""`, "")
}

// linesNotIn returns the lines of a that are not in b, in order.
func linesNotIn(a, b string) string {
	have := map[string]bool{}
	for _, l := range strings.Split(b, "\n") {
		have[l] = true
	}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !have[l] && l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// txLines is the last transaction run on fake, one operation per line,
// sorted, without hashes.
func txLines(fake *knftables.Fake) []string {
	if fake.LastTransaction == nil {
		return nil
	}
	s := stamp.ReplaceAllString(fake.LastTransaction.String(), "")
	s = strings.ReplaceAll(s, ` comment ""`, "")
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return lines
}

// Service builders.

type svcOpt func(*localv1.ServiceEndpoints)

func service(ns, name, clusterIP string, opts ...svcOpt) *localv1.ServiceEndpoints {
	fam := localv1.IPFamily_IPV4
	if strings.Contains(clusterIP, ":") {
		fam = localv1.IPFamily_IPV6
	}
	se := &localv1.ServiceEndpoints{Service: &localv1.Service{Namespace: ns, Name: name, Family: fam,
		Type: localv1.ServiceType_CLUSTER_IP, ClusterIp: clusterIP}}
	for _, o := range opts {
		o(se)
	}
	return se
}

func port(name string, proto localv1.Protocol, p, nodePort int32, hasEndpoints bool) svcOpt {
	return func(se *localv1.ServiceEndpoints) {
		se.Service.Ports = append(se.Service.Ports, &localv1.ServicePort{Name: name, Protocol: proto, Port: p, NodePort: nodePort, TargetPort: p, HasEndpoints: hasEndpoints})
		if nodePort != 0 && se.Service.Type == localv1.ServiceType_CLUSTER_IP {
			se.Service.Type = localv1.ServiceType_NODE_PORT
		}
	}
}

// ep adds an endpoint of port portName; flags: "cluster", "local" (set
// membership), "here" (on this node).
func ep(portName string, proto localv1.Protocol, ip string, p int32, flags ...string) svcOpt {
	return func(se *localv1.ServiceEndpoints) {
		e := &localv1.Endpoint{PortName: portName, Protocol: proto, Ip: ip, Port: p, Ready: true, Serving: true, NodeName: "node-b"}
		for _, f := range flags {
			switch f {
			case "cluster":
				e.InClusterSet = true
			case "local":
				e.InLocalSet = true
			case "here":
				e.OnThisNode, e.NodeName = true, "node-a"
			}
		}
		se.Endpoints = append(se.Endpoints, e)
	}
}

// localLoadBalancer makes a service a LoadBalancer at lbIP with an
// external policy Local, open to the source ranges.
func localLoadBalancer(lbIP string, ranges ...string) svcOpt {
	return withSvc(func(s *localv1.Service) {
		s.Type = localv1.ServiceType_LOAD_BALANCER
		s.LoadBalancerIps = []string{lbIP}
		s.LoadBalancerSourceRanges = ranges
		s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	})
}

func withSvc(f func(*localv1.Service)) svcOpt {
	return func(se *localv1.ServiceEndpoints) { f(se.Service) }
}

const tcp, udp, sctp = localv1.Protocol_TCP, localv1.Protocol_UDP, localv1.Protocol_SCTP

// richServices has a service of every kind, in both families.
func richServices() []*localv1.ServiceEndpoints {
	return []*localv1.ServiceEndpoints{
		// NodePort, Cluster policy, one endpoint here (hairpin).
		service("ns", "web", "10.96.0.5", port("http", tcp, 80, 30080, true),
			ep("http", tcp, "10.0.1.5", 8080, "cluster", "here"), ep("http", tcp, "10.0.2.5", 8080, "cluster")),
		// LoadBalancer, Local external policy, source ranges (one holds the
		// node), an external IP.
		service("ns", "lb", "10.96.0.6", port("https", tcp, 443, 30443, true),
			localLoadBalancer("203.0.113.7", "192.168.0.0/24", "203.0.113.0/24"),
			withSvc(func(s *localv1.Service) {
				s.ExternalIps = []string{"198.51.100.7"}
				s.HealthCheckNodePort = 31000
			}),
			ep("https", tcp, "10.0.1.6", 8443, "cluster", "local", "here"), ep("https", tcp, "10.0.2.6", 8443, "cluster")),
		// No endpoints at all: reject, on every address.
		service("ns", "empty", "10.96.0.7", port("p", tcp, 81, 30081, false),
			withSvc(func(s *localv1.Service) { s.ExternalIps = []string{"198.51.100.8"} })),
		// ClientIP affinity.
		service("ns", "sticky", "10.96.0.8", port("", tcp, 82, 0, true),
			withSvc(func(s *localv1.Service) { s.ClientIpAffinitySeconds = 10800 }),
			ep("", tcp, "10.0.2.8", 80, "cluster"), ep("", tcp, "10.0.3.8", 80, "cluster")),
		// Internal Local policy without a local endpoint: drop.
		service("ns", "nolocal", "10.96.0.9", port("p", udp, 53, 0, true),
			withSvc(func(s *localv1.Service) { s.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL })),
		// Two protocols on one port number.
		service("kube-system", "dns", "10.96.0.10", port("dns", udp, 53, 0, true), port("dns-tcp", tcp, 53, 0, true),
			ep("dns", udp, "10.0.2.10", 53, "cluster"), ep("dns-tcp", tcp, "10.0.2.10", 53, "cluster")),
		// IPv6, NodePort, affinity, an endpoint here.
		service("ns", "web", "fd00:96::5", port("http", tcp, 80, 30080, true),
			withSvc(func(s *localv1.Service) { s.ClientIpAffinitySeconds = 60 }),
			ep("http", tcp, "fd01:1::5", 8080, "cluster", "here"), ep("http", tcp, "fd01:2::5", 8080, "cluster")),
		// IPv6 LoadBalancer with Local policy and no local endpoint: drop
		// external traffic, serve internal.
		service("ns", "lb", "fd00:96::6", port("https", tcp, 443, 30443, true),
			localLoadBalancer("2001:db8::7", "2001:db8::/64"),
			ep("https", tcp, "fd01:2::6", 8443, "cluster")),
	}
}

// ops is the number of operations of the last sync, all tables.
func ops(b *Backend) int {
	n := 0
	for _, s := range b.Last {
		n += s.Operations
	}
	return n
}

// sorted returns a dump's lines sorted: the fake lists elements in the order
// they were added, which a repair changes.
func sorted(d string) string {
	l := strings.Split(strings.TrimSpace(d), "\n")
	slices.Sort(l)
	return strings.Join(l, "\n")
}
