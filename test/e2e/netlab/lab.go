package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// DefaultPorts are the ports every pod's server listens on unless the Spec
// says otherwise.
var DefaultPorts = []int{8080}

// Spec describes the lab to build.
type Spec struct {
	// Nodes lists the nodes, in order: node i gets node IP 192.168.77.(10+i)
	// and fd00:77::(10+i), pod CIDRs 10.244.(i+1).0/24 and
	// fd00:10:244:(i+1)::/64. At most 80 nodes.
	Nodes []NodeSpec
	// Ports are the ports each pod's server listens on, TCP and UDP, IPv4 and
	// IPv6. Empty means DefaultPorts.
	Ports []int
	// Cgroups gives each node a cgroup v2 of its own and a BPF filesystem
	// for pins, for a dataplane that hooks sockets by cgroup (to-ebpf):
	// see [Node.Cgroup]. Without it, the lab's clients are the test
	// process's sockets, in no node's cgroup.
	Cgroups bool
}

// NodeSpec describes one node.
type NodeSpec struct {
	// Name is the node's name, as the cluster state calls it (e.g. "node-1").
	Name string
	// Pods names the pods on this node; pod j gets 10.244.(i+1).(10+j) and
	// fd00:10:244:(i+1)::(10+j). Pod names are unique in the lab. At most 200.
	Pods []string
}

// DefaultSpec is two nodes, two pods on node-1 and one on node-2: enough for
// local and remote endpoints and for load-balancing assertions.
func DefaultSpec() Spec {
	return Spec{Nodes: []NodeSpec{
		{Name: "node-1", Pods: []string{"pod-a", "pod-b"}},
		{Name: "node-2", Pods: []string{"pod-c"}},
	}}
}

// Fixed addresses of the node network.
var (
	// LANGatewayV4 and LANGatewayV6 are the lan bridge's own addresses: the
	// nodes' default gateway, which does not forward.
	LANGatewayV4 = netip.MustParseAddr("192.168.77.1")
	LANGatewayV6 = netip.MustParseAddr("fd00:77::1")
	// ExternalV4 and ExternalV6 are the external client's addresses.
	ExternalV4 = netip.MustParseAddr("192.168.77.100")
	ExternalV6 = netip.MustParseAddr("fd00:77::100")
)

// Names of interfaces, the same in every lab.
const (
	// PodBridge is the pod bridge on each node.
	PodBridge = "kpbr0"
	// NodeInterface is each node's (and the external client's) interface on
	// the node network, and each pod's interface.
	NodeInterface = "eth0"
	lanBridge     = "lan0"
)

// Host is one namespace with addresses that clients can talk from and
// servers can listen on: a node, a pod or the external client.
type Host struct {
	// Name is the host's name: the node or pod name, or "external".
	Name string
	// NS is the host's network namespace.
	NS *Netns
	// IPv4 and IPv6 are the host's primary addresses (for a node, its node
	// IPs on the node network).
	IPv4, IPv6 netip.Addr
	// Server is the host's echo server: always set for pods, set for other
	// hosts once Serve has been called.
	Server *Server

	// sockets opens the host's client sockets in its cgroup, in a lab with
	// cgroups (nil: the test process opens them; see sockets.go).
	sockets *socketMaker
}

// Addrs returns the host's addresses, IPv4 first.
func (h *Host) Addrs() []netip.Addr { return []netip.Addr{h.IPv4, h.IPv6} }

// Addr returns the host's address of the given family (4 or 6).
func (h *Host) Addr(family int) netip.Addr {
	if family == 6 {
		return h.IPv6
	}
	return h.IPv4
}

// Do runs fn in the host's namespace; see [Netns.Do].
func (h *Host) Do(fn func() error) error { return h.NS.Do(fn) }

// Run runs a command in the host's namespace; see [Netns.Run].
func (h *Host) Run(argv ...string) (string, error) { return h.NS.Run(argv...) }

// Serve starts (or extends) the host's echo server on ports, e.g. for
// host-network endpoints on a node. It returns once they answer.
func (h *Host) Serve(ports ...int) error {
	if h.Server == nil {
		h.Server = newServer(h)
	}
	for _, p := range ports {
		if err := h.Server.Listen(p); err != nil {
			return err
		}
	}
	return nil
}

// Node is a node namespace: where the proxy under test runs.
type Node struct {
	Host
	// Index is the node's position in the Spec.
	Index int
	// PodCIDRs are the node's pod CIDRs, IPv4 first.
	PodCIDRs []netip.Prefix
	// GatewayV4 and GatewayV6 are the pod bridge's addresses: the pods'
	// default gateway.
	GatewayV4, GatewayV6 netip.Addr
	// Pods are the pods on this node.
	Pods []*Pod
	// BrNetfilter reports whether the kernel has br_netfilter in this
	// namespace, in which case bridge-nf-call-iptables and
	// bridge-nf-call-ip6tables are 1: traffic between two pods of this node's
	// bridge passes the ip/ip6/inet netfilter hooks, which a proxy needs when
	// a pod reaches a service whose endpoint is on the same bridge. Without
	// it, such tests must be skipped with this reason.
	BrNetfilter bool
	// Cgroup is, in a lab with cgroups (Spec.Cgroups), the node's cgroup
	// v2: a strict descendant of the hierarchy's root, holding a child
	// cgroup for the node's own clients ("node") and one per pod (named
	// after it), whose sockets [Host.Dial] and the others open there, as
	// a kubelet puts its pods under the node's cgroup. A dataplane that
	// attaches socket programs to Cgroup sees every client of the node and
	// its pods, and nothing of the test process or the external client.
	Cgroup string
	// BPFFS is, in a lab with cgroups, a BPF filesystem of the node's own
	// (a new instance, unmounted with its pins at teardown), for a
	// dataplane's pins.
	BPFFS string

	lab *Lab
}

// Pod is a pod namespace on a node's bridge, with its echo server running.
type Pod struct {
	Host
	// Node is the node the pod runs on.
	Node *Node
	// Veth is the host side of the pod's veth, in the node's namespace.
	Veth string
}

// Lab is a built topology. Build one with [New].
type Lab struct {
	// Nodes are the nodes, in Spec order.
	Nodes []*Node
	// External is the client outside the cluster, on the node network.
	External *Host
	// ID is the lab's id: its namespaces are named Prefix+ID+"-"+role.
	ID string
	// BuildTime is how long New took, servers included.
	BuildTime time.Duration

	lan    *Netns
	ports  []int
	mu     sync.Mutex
	nss    []*Netns
	procs  []*Process
	closed bool
	cg     labCgroups
}

// RequireRoot fails the test, with a message saying why, unless it runs as
// root. Labs need root to create namespaces; e2e tests must not silently skip.
func RequireRoot(t testing.TB) {
	t.Helper()
	netnstest.RequireRoot(t)
}

// New builds the lab described by spec and registers its teardown with
// t.Cleanup: on failure it first logs each node's ruleset, conntrack table,
// routes and process output; then it stops processes, servers and deletes
// every namespace. It first sweeps namespaces left by dead earlier runs.
func New(t testing.TB, spec Spec) *Lab {
	t.Helper()
	netnstest.Prepare(t, Sweep)
	l, err := build(spec)
	if l != nil && len(l.cg.swept) > 0 {
		t.Logf("netlab: removed the cgroups and mounts of dead runs: %s", strings.Join(l.cg.swept, " "))
	}
	if l != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(l.Dump())
			}
			start := time.Now()
			if err := l.Close(); err != nil {
				t.Errorf("netlab teardown: %v", err)
			}
			t.Logf("netlab: lab %s torn down in %v", l.ID, time.Since(start).Round(time.Millisecond))
		})
	}
	if err != nil {
		t.Fatalf("netlab: build lab: %v", err)
	}
	t.Logf("netlab: lab %s built in %v", l.ID, l.BuildTime.Round(time.Millisecond))
	return l
}

func build(spec Spec) (*Lab, error) {
	start := time.Now()
	run, err := netnstest.RunID()
	if err != nil {
		return nil, err
	}
	if len(spec.Nodes) == 0 || len(spec.Nodes) > 80 {
		return nil, fmt.Errorf("spec: want 1 to 80 nodes, got %d", len(spec.Nodes))
	}
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("lab id: %w", err)
	}
	l := &Lab{ID: run + "-" + hex.EncodeToString(b), ports: spec.Ports}
	if len(l.ports) == 0 {
		l.ports = DefaultPorts
	}
	defer func() {
		// A panic while building (New's cleanup is not registered yet):
		// leave nothing behind.
		if r := recover(); r != nil {
			l.Close()
			panic(r)
		}
	}()
	if err := l.build(spec); err != nil {
		return l, err
	}
	l.BuildTime = time.Since(start)
	return l, nil
}

// newNetns creates one of the lab's namespaces and remembers it for Close.
func (l *Lab) newNetns(role string) (*Netns, error) {
	n, err := createNetns(Prefix + l.ID + "-" + role)
	if n != nil {
		l.mu.Lock()
		l.nss = append(l.nss, n)
		l.mu.Unlock()
	}
	return n, err
}

// Sysctls every namespace gets before its interfaces exist, so that
// "default" applies to them: no IPv6 duplicate address detection (addresses
// usable at once) and no router advertisements. And no ICMP rate limiting: a
// test that sends a hundred connections to a rejecting service must see a
// hundred rejections, not a burst of six and then what looks like drops.
var baseSysctls = map[string]string{
	"net.ipv4.icmp_ratelimit":          "0",
	"net.ipv4.icmp_msgs_per_sec":       "1000000",
	"net.ipv4.icmp_msgs_burst":         "1000000",
	"net.ipv6.icmp.ratelimit":          "0",
	"net.ipv6.conf.all.accept_dad":     "0",
	"net.ipv6.conf.default.accept_dad": "0",
	"net.ipv6.conf.all.accept_ra":      "0",
	"net.ipv6.conf.default.accept_ra":  "0",
}

// nodeSysctls make a namespace a Kubernetes node as kubelet and the CNI
// plugin leave it: forwarding on, loose reverse-path filtering.
var nodeSysctls = map[string]string{
	"net.ipv4.ip_forward":                  "1",
	"net.ipv6.conf.all.forwarding":         "1",
	"net.ipv6.conf.default.forwarding":     "1",
	"net.ipv4.conf.all.rp_filter":          "2",
	"net.ipv4.conf.default.rp_filter":      "2",
	"net.ipv4.conf.all.accept_redirects":   "0",
	"net.ipv4.conf.all.send_redirects":     "0",
	"net.ipv4.conf.default.send_redirects": "0",
}

func (l *Lab) build(spec Spec) error {
	// The node network: a bridge in its own namespace, which does not forward.
	lan, err := l.newNetns("lan")
	if err != nil {
		return err
	}
	l.lan = lan
	if err := lan.Sysctl(baseSysctls); err != nil {
		return err
	}
	if brNetfilterAvailable(lan) {
		// A plain switch: bridged frames skip the lan namespace's (empty) hooks.
		if err := lan.Sysctl(map[string]string{
			"net.bridge.bridge-nf-call-iptables":  "0",
			"net.bridge.bridge-nf-call-ip6tables": "0",
		}); err != nil {
			return err
		}
	}
	lanCmds := []string{
		"link add " + lanBridge + " type bridge",
		"addr add " + LANGatewayV4.String() + "/24 dev " + lanBridge,
		"addr add " + LANGatewayV6.String() + "/64 dev " + lanBridge + " nodad",
		"link set " + lanBridge + " up",
	}
	if err := lan.IPBatch(lanCmds...); err != nil {
		return err
	}

	podNames := map[string]bool{}
	for i, ns := range spec.Nodes {
		if len(ns.Pods) > 200 {
			return fmt.Errorf("spec: node %s: at most 200 pods", ns.Name)
		}
		n := &Node{
			Host: Host{
				Name: ns.Name,
				IPv4: netip.MustParseAddr(fmt.Sprintf("192.168.77.%d", 10+i)),
				IPv6: netip.MustParseAddr(fmt.Sprintf("fd00:77::%d", 10+i)),
			},
			Index: i,
			PodCIDRs: []netip.Prefix{
				netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i+1)),
				netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%d::/64", i+1)),
			},
			GatewayV4: netip.MustParseAddr(fmt.Sprintf("10.244.%d.1", i+1)),
			GatewayV6: netip.MustParseAddr(fmt.Sprintf("fd00:10:244:%d::1", i+1)),
			lab:       l,
		}
		for _, p := range ns.Pods {
			if podNames[p] {
				return fmt.Errorf("spec: pod name %q used twice", p)
			}
			podNames[p] = true
		}
		l.Nodes = append(l.Nodes, n)
	}

	var lanPorts []string
	for _, n := range l.Nodes {
		if err := l.buildNode(n, spec.Nodes[n.Index].Pods, &lanPorts); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	if spec.Cgroups {
		if err := l.buildCgroups(); err != nil {
			return err
		}
	}

	ext, err := l.newNetns("ext")
	if err != nil {
		return err
	}
	if err := ext.Sysctl(baseSysctls); err != nil {
		return err
	}
	l.External = &Host{Name: "external", NS: ext, IPv4: ExternalV4, IPv6: ExternalV6}
	if err := ext.IPBatch(
		"link add "+NodeInterface+" type veth peer name p-ext netns "+lan.Name,
		"addr add "+ExternalV4.String()+"/24 dev "+NodeInterface,
		"addr add "+ExternalV6.String()+"/64 dev "+NodeInterface+" nodad",
		"link set "+NodeInterface+" up",
	); err != nil {
		return fmt.Errorf("external: %w", err)
	}
	lanPorts = append(lanPorts, "p-ext")
	var cmds []string
	for _, p := range lanPorts {
		cmds = append(cmds, "link set "+p+" master "+lanBridge, "link set "+p+" up")
	}
	if err := lan.IPBatch(cmds...); err != nil {
		return err
	}

	// Routes between nodes need the node network up, so they come last.
	for _, n := range l.Nodes {
		var cmds []string
		for _, o := range l.Nodes {
			if o == n {
				continue
			}
			cmds = append(cmds,
				fmt.Sprintf("route add %s via %s", o.PodCIDRs[0], o.IPv4),
				fmt.Sprintf("route add %s via %s", o.PodCIDRs[1], o.IPv6))
		}
		cmds = append(cmds,
			"route add default via "+LANGatewayV4.String(),
			"route add ::/0 via "+LANGatewayV6.String())
		if err := n.NS.IPBatch(cmds...); err != nil {
			return fmt.Errorf("node %s: routes: %w", n.Name, err)
		}
	}

	for _, n := range l.Nodes {
		for _, p := range n.Pods {
			if err := p.Serve(l.ports...); err != nil {
				return fmt.Errorf("pod %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

func (l *Lab) buildNode(n *Node, pods []string, lanPorts *[]string) error {
	ns, err := l.newNetns(fmt.Sprintf("n%d", n.Index))
	if err != nil {
		return err
	}
	n.NS = ns
	if err := ns.Sysctl(baseSysctls); err != nil {
		return err
	}
	if err := ns.Sysctl(nodeSysctls); err != nil {
		return err
	}
	n.BrNetfilter = brNetfilterAvailable(ns)
	if n.BrNetfilter {
		if err := ns.Sysctl(map[string]string{
			"net.bridge.bridge-nf-call-iptables":  "1",
			"net.bridge.bridge-nf-call-ip6tables": "1",
		}); err != nil {
			return err
		}
	}
	lanPort := fmt.Sprintf("p-n%d", n.Index)
	*lanPorts = append(*lanPorts, lanPort)
	cmds := []string{
		"link add " + NodeInterface + " type veth peer name " + lanPort + " netns " + l.lan.Name,
		"addr add " + n.IPv4.String() + "/24 dev " + NodeInterface,
		"addr add " + n.IPv6.String() + "/64 dev " + NodeInterface + " nodad",
		"link set " + NodeInterface + " up",
		"link add " + PodBridge + " type bridge",
		fmt.Sprintf("addr add %s/24 dev %s", n.GatewayV4, PodBridge),
		fmt.Sprintf("addr add %s/64 dev %s nodad", n.GatewayV6, PodBridge),
		"link set " + PodBridge + " up",
	}
	for j, name := range pods {
		podNS, err := l.newNetns(fmt.Sprintf("n%d-p%d", n.Index, j))
		if err != nil {
			return err
		}
		if err := podNS.Sysctl(baseSysctls); err != nil {
			return err
		}
		p := &Pod{
			Host: Host{
				Name: name,
				NS:   podNS,
				IPv4: netip.MustParseAddr(fmt.Sprintf("10.244.%d.%d", n.Index+1, 10+j)),
				IPv6: netip.MustParseAddr(fmt.Sprintf("fd00:10:244:%d::%d", n.Index+1, 10+j)),
			},
			Node: n,
			Veth: fmt.Sprintf("vp%d", j),
		}
		n.Pods = append(n.Pods, p)
		cmds = append(cmds,
			"link add "+p.Veth+" type veth peer name "+NodeInterface+" netns "+podNS.Name,
			"link set "+p.Veth+" master "+PodBridge,
			// Hairpin: a pod reaching itself through a service gets its own
			// packets back out of the same bridge port.
			"link set "+p.Veth+" type bridge_slave hairpin on",
			"link set "+p.Veth+" up")
	}
	if err := ns.IPBatch(cmds...); err != nil {
		return err
	}
	for _, p := range n.Pods {
		if err := p.NS.IPBatch(
			fmt.Sprintf("addr add %s/24 dev %s", p.IPv4, NodeInterface),
			fmt.Sprintf("addr add %s/64 dev %s nodad", p.IPv6, NodeInterface),
			"link set "+NodeInterface+" up",
			fmt.Sprintf("route add default via %s", n.GatewayV4),
			fmt.Sprintf("route add ::/0 via %s", n.GatewayV6),
		); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// brNetfilterAvailable reports whether br_netfilter's sysctls exist in ns.
// Since Linux 5.3 they are per namespace; they exist once the module is
// loaded (or built in). The harness does not load modules: it only reports.
func brNetfilterAvailable(ns *Netns) bool {
	_, err := ns.ReadSysctl("net.bridge.bridge-nf-call-iptables")
	return err == nil
}

// Node returns the node called name, or nil.
func (l *Lab) Node(name string) *Node {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Pod returns the pod called name, or nil.
func (l *Lab) Pod(name string) *Pod {
	for _, p := range l.Pods() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Pods returns every pod of the lab, node by node.
func (l *Lab) Pods() []*Pod {
	var ps []*Pod
	for _, n := range l.Nodes {
		ps = append(ps, n.Pods...)
	}
	return ps
}

// Ports returns the ports every pod server listens on.
func (l *Lab) Ports() []int { return l.ports }

// Namespaces returns the names of the lab's namespaces.
func (l *Lab) Namespaces() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, len(l.nss))
	for i, n := range l.nss {
		names[i] = n.Name
	}
	return names
}

// Close stops every process started in the lab, closes every server and
// deletes every namespace. New registers it with t.Cleanup; calling it again
// is a no-op.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs, nss := l.procs, l.nss
	l.mu.Unlock()

	var errs []error
	for _, p := range procs {
		if err := p.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, h := range l.hosts() {
		if h.Server != nil {
			h.Server.Close()
		}
	}
	for _, h := range l.hosts() {
		if h.sockets != nil {
			h.sockets.close()
		}
	}
	for _, n := range nss {
		if err := netnstest.Delete(n.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.cg.remove(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (l *Lab) hosts() []*Host {
	var hs []*Host
	for _, n := range l.Nodes {
		hs = append(hs, &n.Host)
		for _, p := range n.Pods {
			hs = append(hs, &p.Host)
		}
	}
	if l.External != nil {
		hs = append(hs, l.External)
	}
	return hs
}
