//go:build e2e

package faults

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// Addresses and ports of the services every variant runs.
const (
	targetPort  = 8080
	npCluster   = 30080
	npLocal     = 30081
	npLB        = 30082
	lbIP        = "203.0.113.20"
	lbRoute     = "203.0.113.0/24"
	firstSync   = time.Minute
	syncTimeout = 15 * time.Second
	// answerTimeout bounds one attempt that waits for a proxy to program
	// a change (the probes under faults are netlab.Host.Probe): an answer
	// on veths takes well under a millisecond.
	answerTimeout = time.Second
	// probeEvery is each probe's period: 50 a second per probe.
	probeEvery = 20 * time.Millisecond
)

// variant is one way of running a proxy: kpng's backend in one process,
// kpng's backend behind a brain that serves node agents over gRPC, or
// upstream kube-proxy.
type variant struct {
	name string
	// backend is kpng's backend (nft, iptables, ebpf) or kube-proxy's
	// mode (nftables, iptables).
	backend   string
	split     bool
	kubeProxy bool
}

func (v variant) nftables() bool { return v.backend == "nft" || v.backend == "nftables" }

// ebpf reports whether the variant is kpng's to-ebpf, whose dataplane is
// BPF programs and maps: it runs in a lab with a cgroup per node, and its
// damage faults are the maps' and links' (ebpf_test.go).
func (v variant) ebpf() bool { return v.backend == "ebpf" && !v.kubeProxy }

// form names the variant's deployment form in the table.
func (v variant) form() string {
	switch {
	case v.kubeProxy:
		return "kube-proxy " + v.backend
	case v.split:
		return "kpng " + v.backend + ", brain + agents"
	default:
		return "kpng " + v.backend + ", one process"
	}
}

// syncedLine is what the proxy logs after a successful sync.
func (v variant) syncedLine() string {
	if v.kubeProxy {
		return "SyncProxyRules complete"
	}
	return "Dataplane synced"
}

func parseVariant(t *testing.T, name string) variant {
	t.Helper()
	if mode, ok := strings.CutPrefix(name, "kube-proxy-"); ok {
		if mode != "nftables" && mode != "iptables" {
			t.Fatalf("variant %q: kube-proxy-nftables or kube-proxy-iptables", name)
		}
		return variant{name: name, backend: mode, kubeProxy: true}
	}
	b, split := strings.CutSuffix(name, "-split")
	if b != "nft" && b != "iptables" && b != "ebpf" {
		t.Fatalf("variant %q: nft, iptables, ebpf, nft-split, iptables-split, ebpf-split, kube-proxy-nftables or kube-proxy-iptables", name)
	}
	return variant{name: name, backend: b, split: split}
}

// fastVariants are those of CI's fast subset: each backend once, each form
// once. ebpf adds one to two minutes to CI (with the short durations, on 2
// cores: 72-114 s at a load average of 15-22), of a 90-minute budget for
// hack/test.sh; its split form would add as much, and tests nothing that
// iptables-split does not, but for the backend.
const fastVariants = "nft,iptables-split,ebpf"

func variants(t *testing.T) []variant {
	names := os.Getenv("KPNG_FAULTS_VARIANTS")
	if names == "" {
		names = fastVariants
	}
	var vs []variant
	for _, n := range strings.Split(names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			vs = append(vs, parseVariant(t, n))
		}
	}
	return vs
}

// durations of the faults: the with KPNG_FAULTS_FULL=1, shorter in
// CI's fast subset.
type durations struct {
	churn, createDelete, outage time.Duration
	idleConns                   int
}

// fullRun reports whether this is hack/faults.sh's run (KPNG_FAULTS_FULL=1):
// the durations, and the speed targets judged.
func fullRun() bool { return os.Getenv("KPNG_FAULTS_FULL") == "1" }

func faultDurations() durations {
	if fullRun() {
		return durations{churn: 60 * time.Second, createDelete: 60 * time.Second, outage: 30 * time.Second, idleConns: 1000}
	}
	return durations{churn: 10 * time.Second, createDelete: 10 * time.Second, outage: 5 * time.Second, idleConns: 1000}
}

// cluster is a lab with a real API server and a proxy in every node.
type cluster struct {
	v      variant
	lab    *netlab.Lab
	state  *netlab.State
	mirror *netlab.Mirror
	api    kubernetes.Interface
	cfg    netlab.ProxyConfig
	// procs is each node's proxy (the agent, for a split variant).
	procs map[*netlab.Node]*netlab.Process
	// brain serves the agents of a split variant, from node-1; sock is its
	// unix socket.
	brain *netlab.Process
	sock  string
	svcs  map[string]*corev1.Service
}

func (c *cluster) node(name string) *netlab.Node { return c.lab.Node(name) }

// startCluster builds the lab, states the services, starts the API server
// and the proxies, and returns once every proxy has synced.
func startCluster(t *testing.T, v variant) *cluster {
	t.Helper()
	spec := netlab.DefaultSpec()
	// to-ebpf's socket programs attach to each node's own cgroup, where
	// the lab's clients open their sockets: never the machine's root.
	spec.Cgroups = v.ebpf()
	lab := netlab.New(t, spec)
	c := &cluster{v: v, lab: lab, state: netlab.NewState(t, lab), procs: map[*netlab.Node]*netlab.Process{}, svcs: map[string]*corev1.Service{},
		cfg: netlab.ProxyConfig{DetectLocalMode: "ClusterCIDR", ClusterCIDRs: []netip.Prefix{netlab.ClusterCIDRv4, netlab.ClusterCIDRv6}}}
	if v.ebpf() {
		// Maps have no change notification: to-ebpf repairs them at its
		// periodic sync, whose period bounds the map faults' repair.
		c.cfg.SyncPeriod = ebpfSyncPeriod
	}
	a, b, cc := lab.Pod("pod-a"), lab.Pod("pod-b"), lab.Pod("pod-c")
	add := func(name string, eps []netlab.Endpoint, ports ...corev1.ServicePort) *corev1.Service {
		if len(ports) == 0 {
			ports = []corev1.ServicePort{netlab.TCPPort("tcp", 80, targetPort), netlab.UDPPort("udp", 80, targetPort)}
		}
		svc := c.state.AddService(name, ports...)
		c.state.SetEndpoints(svc, eps...)
		c.svcs[name] = svc
		return svc
	}
	add("web", netlab.Ready(b, cc))
	np := add("np", netlab.Ready(a, cc))
	nodePorts(np, npCluster)
	npl := add("np-local", netlab.Ready(a))
	nodePorts(npl, npLocal)
	npl.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	lb := add("lb", netlab.Ready(cc))
	nodePorts(lb, npLB)
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	add("churn", netlab.Ready(b, cc))
	add("refuse", netlab.Ready(b))
	c.state.Write(t)

	c.mirror = netlab.StartMirror(t, c.state.Path)
	c.api = c.mirror.Server.Client
	for _, n := range lab.Nodes {
		c.mirror.Forward(t, n)
	}
	n1 := lab.Node("node-1")
	if _, err := lab.External.Run("ip", "route", "add", lbRoute, "via", n1.IPv4.String()); err != nil {
		t.Fatal(err)
	}

	kubeconfig := c.mirror.Server.KubeconfigPath
	if v.split {
		dir, err := os.MkdirTemp("", "kpng-faults-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		c.sock = dir + "/brain.sock"
		c.brain = n1.Start(t, netlab.KpngBinary(t), "--v=2", "kube", "--kubeconfig", kubeconfig, "to-api", "--listen", "unix://"+c.sock)
		c.brain.WaitOutput(t, "Serving the localv1 and globalv1 Watch APIs", firstSync)
	}
	for _, n := range lab.Nodes {
		c.procs[n] = n.Start(t, c.argv(t, n, kubeconfig)...)
	}
	for _, p := range c.procs {
		p.WaitOutput(t, v.syncedLine(), firstSync)
	}
	return c
}

// argv is the proxy's command line in node n.
func (c *cluster) argv(t *testing.T, n *netlab.Node, kubeconfig string) []string {
	switch {
	case c.v.kubeProxy:
		return netlab.KubeProxy(c.v.backend).Argv(t, n, kubeconfig, c.cfg)
	case c.v.split:
		// The backend's flags in node n as netlab gives them to kpng in
		// one process (for to-ebpf: the node's cgroup, pin folder and
		// interfaces), after its to-<backend>.
		one := netlab.KpngKube(c.v.backend).Argv(t, n, kubeconfig, c.cfg)
		flags := one[slices.Index(one, "to-"+c.v.backend)+1:]
		return append([]string{netlab.KpngBinary(t), "--v=2", "local", "--api", "unix://" + c.sock, "--node-name", n.Name, "to-" + c.v.backend}, flags...)
	default:
		return netlab.KpngKube(c.v.backend).Argv(t, n, kubeconfig, c.cfg)
	}
}

// nodePorts makes svc a NodePort service, each of its ports on nodePort.
func nodePorts(svc *corev1.Service, nodePort int) {
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = int32(nodePort)
	}
}

// probe is one kind of traffic a user sends to the services.
type probe struct {
	name string
	dial func() netlab.Result
}

// probes are the traffic every fault runs under.
func (c *cluster) probes() []probe {
	podA, ext, n1 := c.lab.Pod("pod-a"), c.lab.External, c.node("node-1")
	dial := func(h *netlab.Host, proto netlab.Protocol, dst netip.AddrPort) func() netlab.Result {
		return func() netlab.Result { return h.Probe(proto, dst) }
	}
	return []probe{
		{"ClusterIP TCP", dial(&podA.Host, netlab.TCP, netlab.ClusterIP(c.svcs["web"], 4, 80))},
		{"ClusterIP UDP", dial(&podA.Host, netlab.UDP, netlab.ClusterIP(c.svcs["web"], 4, 80))},
		{"NodePort", dial(ext, netlab.TCP, netip.AddrPortFrom(n1.IPv4, npCluster))},
		{"LoadBalancer IP", dial(ext, netlab.TCP, netip.AddrPortFrom(netip.MustParseAddr(lbIP), 80))},
		{"local NodePort", dial(ext, netlab.TCP, netip.AddrPortFrom(n1.IPv4, npLocal))},
	}
}

// probeRun sends each probe every probeEvery until stop. A probe is a
// netlab.Host.Probe: it fails on a drop the kernel recorded, or no answer
// at all, never because the test process stood still.
type probeRun struct {
	mu     sync.Mutex
	sent   int
	failed map[string]int
	first  map[string]netlab.Result
	// firstAt is when the first failure of each probe was sent.
	firstAt map[string]time.Time
	// stalls watches the test process (netlab.StallWatch), whose longest
	// stall is reported beside failures: it explains a slow run, not a
	// failed probe.
	stalls   *netlab.StallWatch
	done     chan struct{}
	wg       sync.WaitGroup
	probeSet []probe
}

// startProbes starts the traffic, once every probe answers.
func (c *cluster) startProbes(t *testing.T) *probeRun {
	t.Helper()
	ps := c.probes()
	for _, p := range ps {
		netlab.Eventually(t, 10*time.Second, p.dial, netlab.Answered())
	}
	r := &probeRun{failed: map[string]int{}, first: map[string]netlab.Result{}, firstAt: map[string]time.Time{},
		stalls: netlab.WatchStalls(), done: make(chan struct{}), probeSet: ps}
	for _, p := range ps {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			tick := time.NewTicker(probeEvery)
			defer tick.Stop()
			for {
				select {
				case <-r.done:
					return
				case <-tick.C:
				}
				sent := time.Now()
				res := p.dial()
				r.mu.Lock()
				r.sent++
				if res.Outcome != netlab.OK {
					if r.failed[p.name] == 0 {
						r.first[p.name], r.firstAt[p.name] = res, sent
					}
					r.failed[p.name]++
				}
				r.mu.Unlock()
			}
		}()
	}
	t.Cleanup(r.stop)
	return r
}

// stop ends the traffic; it may be called more than once.
func (r *probeRun) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.wg.Wait()
	r.stalls.Stop()
}

// counts stops the traffic and returns what it saw: probes sent, failed,
// and a word on the failures.
func (r *probeRun) counts() (sent, failed int, failures string) {
	r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, p := range r.probeSet {
		if n := r.failed[p.name]; n > 0 {
			failed += n
			parts = append(parts, fmt.Sprintf("%s: %d (first, sent at %s: %v)", p.name, n, r.firstAt[p.name].Format("15:04:05.000"), r.first[p.name]))
		}
	}
	if stall, stallAt := r.stalls.Longest(); failed > 0 && stall >= answerTimeout/2 {
		parts = append(parts, fmt.Sprintf("the test process stood still for %v, until %s",
			stall.Round(time.Millisecond), stallAt.Format("15:04:05.000")))
	}
	return r.sent, failed, strings.Join(parts, "; ")
}
