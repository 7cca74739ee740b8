//go:build e2e

package services

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// Timeouts of one client attempt. An answer or a rejection arrives in well
// under a millisecond on veths, so an expected drop is waited for briefly;
// an attempt expected to be answered is a netlab.Host.Probe (prober),
// which waits longer and judges by the kernel's retransmissions.
// answerTimeout bounds the other exchanges (HTTP, streams, UDP sessions).
const (
	answerTimeout = time.Second
	dropTimeout   = 300 * time.Millisecond
	// syncTimeout bounds the first sync of a backend and each later one.
	firstSyncTimeout = time.Minute
	syncTimeout      = 15 * time.Second
	// settle bounds how long a change may take to show in traffic.
	settle = 10 * time.Second
)

// backends returns the backends to run, from KPNG_E2E_BACKENDS or, by
// default, every backend the kpng binary offers. No backend is a failure.
func backends(t *testing.T) []netlab.Backend {
	t.Helper()
	var names []string
	if env := os.Getenv("KPNG_E2E_BACKENDS"); env != "" {
		for _, n := range strings.Split(env, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	} else {
		names = netlab.KpngBackends(t)
		if len(names) == 0 {
			t.Fatalf("the kpng binary offers no backend (no to-<name> under `kpng file to-local`): nothing to test; is backends/nft registered in cmd/kpng?")
		}
	}
	var bs []netlab.Backend
	for _, n := range names {
		if b := referenceBackend(t, n); b != nil {
			bs = append(bs, b)
		} else {
			bs = append(bs, netlab.Kpng(n))
		}
	}
	return bs
}

// forEachBackend runs f as a subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b netlab.Backend)) {
	for _, b := range backends(t) {
		t.Run(b.Name(), func(t *testing.T) { f(t, b) })
	}
}

// cluster is a lab running a backend in every node, and its state.
type cluster struct {
	lab     *netlab.Lab
	state   *netlab.State
	backend netlab.Backend
	cfg     netlab.ProxyConfig
	procs   map[*netlab.Node]*netlab.Process
	// rulesBefore is each node's firewall rules before the backend started.
	rulesBefore map[*netlab.Node][]string
}

// defaultConfig is how a typical cluster runs its proxy: local traffic
// detected by the cluster CIDR.
func defaultConfig() netlab.ProxyConfig {
	return netlab.ProxyConfig{
		DetectLocalMode: "ClusterCIDR",
		ClusterCIDRs:    []netip.Prefix{netlab.ClusterCIDRv4, netlab.ClusterCIDRv6},
	}
}

// startCluster builds the default lab (with a cgroup per node for a
// backend that hooks sockets by cgroup, to-ebpf: its programs attach to the
// node's cgroup, where the lab's clients open their sockets), lets setup
// state the services, and starts b with cfg on every node, returning after
// each node's first sync.
func startCluster(t *testing.T, b netlab.Backend, cfg netlab.ProxyConfig, setup func(l *netlab.Lab, s *netlab.State)) *cluster {
	t.Helper()
	spec := netlab.DefaultSpec()
	spec.Cgroups = netlab.NeedsCgroups(b)
	lab := netlab.New(t, spec)
	c := &cluster{lab: lab, state: netlab.NewState(t, lab), backend: b, cfg: cfg,
		procs: map[*netlab.Node]*netlab.Process{}, rulesBefore: map[*netlab.Node][]string{}}
	if setup != nil {
		setup(lab, c.state)
	}
	c.state.Write(t)
	for _, n := range lab.Nodes {
		c.rulesBefore[n] = firewallRules(t, n)
		c.procs[n] = b.Start(t, n, c.state.Path, cfg)
	}
	for _, n := range lab.Nodes {
		c.procs[n].WaitOutput(t, b.SyncedLine(), firstSyncTimeout)
	}
	return c
}

// apply writes the state and waits until every node's backend has synced
// after it. The state must have changed: a proxy need not sync for nothing.
func (c *cluster) apply(t *testing.T) {
	t.Helper()
	marks := map[*netlab.Node]int{}
	for n, p := range c.procs {
		marks[n] = p.Mark()
	}
	c.state.Write(t)
	sl, ok := c.backend.(netlab.StateLoader)
	if !ok {
		for n, p := range c.procs {
			p.WaitOutputSince(t, marks[n], c.backend.SyncedLine(), syncTimeout)
		}
		return
	}
	// Not the first sync logged after the write: it may be an earlier
	// content's, and a write that leaves a node's view as it was brings
	// none.
	digest := c.state.Digest()
	for n, p := range c.procs {
		applied := func(run string, since int) bool { return sl.Applied(run, since, digest) }
		if !p.AwaitRunOutput(marks[n], applied, syncTimeout) {
			t.Fatalf("node %s: the state %s is not in the dataplane within %v; output:\n%s", n.Name, digest, syncTimeout, p.Output())
		}
	}
}

// pod returns the lab's pod called name.
func (c *cluster) pod(name string) *netlab.Pod { return c.lab.Pod(name) }

// node returns the lab's node called name.
func (c *cluster) node(name string) *netlab.Node { return c.lab.Node(name) }

// families are the IP families every test covers.
var families = []int{4, 6}

func ipv(fam int) string { return fmt.Sprintf("IPv%d", fam) }

// dialer returns a function for Eventually and Spread.
func dialer(h *netlab.Host, proto netlab.Protocol, dst netip.AddrPort, timeout time.Duration) func() netlab.Result {
	return func() netlab.Result { return h.Dial(proto, dst, timeout) }
}

// prober returns an attempt expected to be answered or refused
// (netlab.Host.Probe): it waits for the answer as long as a loaded machine
// may keep the test process from reading it, and fails on any drop the
// kernel recorded.
func prober(h *netlab.Host, proto netlab.Protocol, dst netip.AddrPort) func() netlab.Result {
	return func() netlab.Result { return h.Probe(proto, dst) }
}

// dialFor returns the attempt of a test that expects want: an expected
// drop is waited for briefly (dropTimeout; no answer can come, and a stall
// of the test process cannot make one), anything else is probed.
func dialFor(want netlab.Outcome, h *netlab.Host, proto netlab.Protocol, dst netip.AddrPort) func() netlab.Result {
	if want == netlab.TimedOut {
		return dialer(h, proto, dst, dropTimeout)
	}
	return prober(h, proto, dst)
}

// expectSpread makes n attempts and fails unless every one was answered,
// only by pods in want, and by each of them at least once.
func expectSpread(t *testing.T, n int, dial func() netlab.Result, want ...string) map[string]int {
	t.Helper()
	got := netlab.Spread(n, dial)
	ok := len(got) == len(want)
	for _, w := range want {
		if got[w] == 0 {
			ok = false
		}
	}
	if !ok {
		t.Errorf("%d attempts: want answers from each of %v only, got %s", n, want, netlab.FormatSpread(got))
	}
	return got
}

// expectOnly makes n attempts and fails unless every one got outcome o (and,
// for OK, was answered by pod).
func expectOnly(t *testing.T, n int, dial func() netlab.Result, o netlab.Outcome, pod string) {
	t.Helper()
	for i := range n {
		r := dial()
		if r.Outcome != o || (o == netlab.OK && r.Pod != pod) {
			want := o.String()
			if o == netlab.OK {
				want = "an answer from " + pod
			}
			t.Errorf("attempt %d of %d: want %s, got %v", i+1, n, want, r)
			return
		}
	}
}

// firewallRules returns the rules in node's nftables ruleset and in
// iptables-save / ip6tables-save: what a proxy adds and its cleanup must
// remove. Tables and base chains that are left empty are not rules.
func firewallRules(t *testing.T, n *netlab.Node) []string {
	t.Helper()
	out, err := n.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	var rules []string
	var table, chain string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "table" && len(f) >= 3:
			table, chain = f[1]+" "+f[2], ""
		case f[0] == "chain" && len(f) >= 2:
			chain = f[1]
		case f[0] == "}":
			if chain != "" {
				chain = ""
			}
		case chain != "" && f[0] != "type" && f[0] != "policy" && f[0] != "comment":
			rules = append(rules, "nft "+table+" "+chain+": "+strings.TrimSpace(line))
		}
	}
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out, err := n.Run(cmd)
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "-A ") {
				rules = append(rules, cmd+": "+line)
			}
		}
	}
	return rules
}
