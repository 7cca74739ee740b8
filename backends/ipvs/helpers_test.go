package ipvs

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// fakeKernel is kernel in memory: kube-ipvs0's addresses, the node's
// addresses, the ipset members and the iptables scripts written.
type fakeKernel struct {
	dummy     bool
	addrs     map[netip.Addr]bool
	node      []netip.Addr
	sets      map[string]map[string]bool
	rules     map[bool][]byte
	setWrites int
	// setScripts are the ipset restore scripts run, in order.
	setScripts []string
	// setLists counts the listings of the sets' headers (ipset list -t).
	setLists int
	// ipt is iptables, per family.
	ipt map[bool]*fakeIPTables
	// render, when set, is how iptables-save renders a rule's args
	// (strings.Join(args, " ") otherwise).
	render func(args []string) string
	// failRestore, when set, fails the iptables-restore scripts it
	// returns an error for, changing nothing.
	failRestore func(script string) error
	// saves, restores and perJump count the iptables processes run:
	// iptables-save, iptables-restore, iptables -C/-I/-D.
	saves, restores, perJump int
}

func newFakeKernel(node ...string) *fakeKernel {
	k := &fakeKernel{addrs: map[netip.Addr]bool{}, sets: map[string]map[string]bool{}, rules: map[bool][]byte{},
		ipt: map[bool]*fakeIPTables{false: newFakeIPTables(), true: newFakeIPTables()}}
	for _, s := range node {
		k.node = append(k.node, netip.MustParseAddr(s))
	}
	return k
}

func (k *fakeKernel) ensureDummy() error { k.dummy = true; return nil }
func (k *fakeKernel) dummyAddrs(ipv6 bool) ([]netip.Addr, error) {
	var out []netip.Addr
	for a := range k.addrs {
		if a.Is6() == ipv6 {
			out = append(out, a)
		}
	}
	return out, nil
}
func (k *fakeKernel) addAddr(a netip.Addr) error { k.addrs[a] = true; return nil }
func (k *fakeKernel) delAddr(a netip.Addr) error { delete(k.addrs, a); return nil }
func (k *fakeKernel) nodeAddrs(ipv6 bool) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range k.node {
		if a.Is6() == ipv6 {
			out = append(out, a)
		}
	}
	return out, nil
}

// ipsetRestore applies the subset of ipset restore the backend writes.
func (k *fakeKernel) ipsetRestore(_ context.Context, script []byte) error {
	if len(script) > 0 {
		k.setWrites++
		k.setScripts = append(k.setScripts, string(script))
	}
	for _, line := range strings.Split(strings.TrimSpace(string(script)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "create":
			if k.sets[f[1]] == nil {
				k.sets[f[1]] = map[string]bool{}
			}
		case "flush":
			k.sets[f[1]] = map[string]bool{}
		case "destroy":
			delete(k.sets, f[1])
		case "swap":
			k.sets[f[1]], k.sets[f[2]] = k.sets[f[2]], k.sets[f[1]]
		case "add":
			k.sets[f[1]][f[2]] = true
		case "del":
			delete(k.sets[f[1]], f[2])
		}
	}
	return nil
}

func (k *fakeKernel) ipsets(context.Context) (map[string]bool, error) {
	m := map[string]bool{}
	for s := range k.sets {
		m[s] = true
	}
	return m, nil
}

func (k *fakeKernel) ipsetSizes(context.Context) (map[string]int, error) {
	k.setLists++
	m := map[string]int{}
	for s, members := range k.sets {
		m[s] = len(members)
	}
	return m, nil
}

// iptablesRestore applies script to the family's iptables, all of it or
// (on an error) nothing, and keeps the script.
func (k *fakeKernel) iptablesRestore(_ context.Context, ipv6 bool, script []byte) error {
	k.restores++
	if k.failRestore != nil {
		if err := k.failRestore(string(script)); err != nil {
			return err
		}
	}
	next := k.ipt[ipv6].clone()
	if err := next.restore(string(script)); err != nil {
		return err
	}
	k.ipt[ipv6] = next
	k.rules[ipv6] = bytes.Clone(script)
	return nil
}

func (k *fakeKernel) iptablesSave(_ context.Context, ipv6 bool) ([]byte, error) {
	k.saves++
	render := k.render
	if render == nil {
		render = func(args []string) string { return strings.Join(args, " ") }
	}
	return k.ipt[ipv6].save(render), nil
}

// ensureJump and deleteJump compare rules by their args, as iptables -C
// compares them by meaning: k.render does not change them.
func (k *fakeKernel) ensureJump(_ context.Context, ipv6 bool, j jump) error {
	k.perJump++
	t := k.ipt[ipv6]
	if t.count(j) > 0 {
		return nil
	}
	k.perJump++
	return t.restore(fmt.Sprintf("*%s\n-I %s %s\nCOMMIT\n", j.table, j.chain, strings.Join(j.args, " ")))
}

func (k *fakeKernel) deleteJump(_ context.Context, ipv6 bool, j jump) error {
	t := k.ipt[ipv6]
	for {
		k.perJump++
		if t.count(j) == 0 {
			return nil
		}
		k.perJump++
		if err := t.restore(fmt.Sprintf("*%s\n-D %s %s\nCOMMIT\n", j.table, j.chain, strings.Join(j.args, " "))); err != nil {
			return err
		}
	}
}

// jumpCount counts the rules of every jump in a family.
func (k *fakeKernel) jumpCount(ipv6 bool) int {
	n := 0
	for _, j := range jumps {
		n += k.ipt[ipv6].count(j)
	}
	return n
}

// fakeIPTables is the part of iptables the backend uses: tables of chains
// of rules (each its args joined by spaces), the built-in chains always
// there.
type fakeIPTables struct {
	// chains maps "table chain" to its rules, in order.
	chains map[string][]string
}

var builtinChains = map[string][]string{
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

func newFakeIPTables() *fakeIPTables {
	t := &fakeIPTables{chains: map[string][]string{}}
	for table, chs := range builtinChains {
		for _, ch := range chs {
			t.chains[table+" "+ch] = nil
		}
	}
	return t
}

func (t *fakeIPTables) clone() *fakeIPTables {
	c := &fakeIPTables{chains: map[string][]string{}}
	for k, v := range t.chains {
		c.chains[k] = slices.Clone(v)
	}
	return c
}

func (t *fakeIPTables) count(j jump) int {
	n := 0
	for _, r := range t.chains[j.table+" "+j.chain] {
		if r == strings.Join(j.args, " ") {
			n++
		}
	}
	return n
}

// restore applies an iptables-restore --noflush script: declarations
// (which create or empty a chain), -A, -I (at the head), -D (the first
// equal rule), -X (refused while a rule jumps to the chain).
func (t *fakeIPTables) restore(script string) error {
	table := ""
	for n, line := range strings.Split(strings.TrimSpace(script), "\n") {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("line %d %q: %s", n+1, line, fmt.Sprintf(format, args...))
		}
		op, rest, _ := strings.Cut(line, " ")
		chain, args, _ := strings.Cut(rest, " ")
		key := table + " " + chain
		_, exists := t.chains[key]
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case line == "COMMIT":
			table = ""
		case strings.HasPrefix(line, ":"):
			t.chains[table+" "+strings.TrimPrefix(op, ":")] = nil
		case !exists:
			return fail("no chain %s in table %s", chain, table)
		case op == "-A":
			t.chains[key] = append(t.chains[key], args)
		case op == "-I":
			t.chains[key] = append([]string{args}, t.chains[key]...)
		case op == "-D":
			i := slices.Index(t.chains[key], args)
			if i < 0 {
				return fail("no such rule")
			}
			t.chains[key] = slices.Delete(t.chains[key], i, i+1)
		case op == "-X":
			for k, rules := range t.chains {
				for _, r := range rules {
					if strings.HasPrefix(k, table+" ") && strings.HasSuffix(r, "-j "+chain) {
						return fail("chain %s is referenced by %s: %s", chain, k, r)
					}
				}
			}
			delete(t.chains, key)
		default:
			return fail("unknown command")
		}
	}
	return nil
}

// save renders the tables as iptables-save does, each rule's args by
// render.
func (t *fakeIPTables) save(render func([]string) string) []byte {
	var b bytes.Buffer
	b.WriteString("# Generated by the fake\n")
	for _, table := range []string{"mangle", "filter", "nat"} {
		fmt.Fprintf(&b, "*%s\n", table)
		var keys []string
		for k := range t.chains {
			if strings.HasPrefix(k, table+" ") {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, ":%s - [0:0]\n", strings.TrimPrefix(k, table+" "))
		}
		for _, k := range keys {
			for _, r := range t.chains[k] {
				fmt.Fprintf(&b, "-A %s %s\n", strings.TrimPrefix(k, table+" "), render(strings.Fields(r)))
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// members lists a set's members, sorted.
func (k *fakeKernel) members(set string) []string {
	var out []string
	for m := range k.sets[set] {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// svcOpt changes a test Service.
type svcOpt func(*localv1.ServiceEndpoints)

// service is a ServiceEndpoints of the IPv4 family with one TCP port 80
// named "http" unless opts say otherwise.
func service(ns, name, clusterIP string, opts ...svcOpt) *localv1.ServiceEndpoints {
	se := &localv1.ServiceEndpoints{Service: &localv1.Service{
		Namespace: ns, Name: name, Family: localv1.IPFamily_IPV4, ClusterIp: clusterIP,
		Ports: []*localv1.ServicePort{{Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, TargetPort: 8080}},
	}}
	for _, o := range opts {
		o(se)
	}
	return se
}

func withPorts(ports ...*localv1.ServicePort) svcOpt {
	return func(se *localv1.ServiceEndpoints) { se.Service.Ports = ports }
}

func withNodePort(np int32) svcOpt {
	return func(se *localv1.ServiceEndpoints) { se.Service.Ports[0].NodePort = np }
}

func withEndpoints(eps ...*localv1.Endpoint) svcOpt {
	return func(se *localv1.ServiceEndpoints) {
		se.Endpoints = eps
		for _, p := range se.Service.Ports {
			p.HasEndpoints = len(eps) > 0
		}
	}
}

// ep is a ready endpoint of port "http"/TCP in the cluster set; local
// ones are in the local set too.
func ep(ip string, port int32, local bool) *localv1.Endpoint {
	return &localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_TCP, Ip: ip, Port: port,
		Ready: true, Serving: true, InClusterSet: true, InLocalSet: local, OnThisNode: local}
}

// stateOf builds a State from services.
func stateOf(services ...*localv1.ServiceEndpoints) *backend.State {
	st := backend.NewState("node-1")
	st.Node = &localv1.Node{Name: "node-1", Addresses: []string{"192.168.77.10"}, PodCidrs: []string{"10.244.1.0/24"}}
	for _, se := range services {
		st.Services[backend.KeyOf(se)] = se
	}
	return st
}

func testConfig() *Config {
	c := DefaultConfig()
	c.IPFamilies = []string{"ipv4"}
	c.ClusterCIDRs = []string{"10.244.0.0/16"}
	if err := c.validate(); err != nil {
		panic(err)
	}
	return &c
}

// newTestBackend is a Backend on a Fake IPVS and a fake kernel with node
// address 192.168.77.10.
func newTestBackend(t *testing.T, cfg *Config) (*Backend, *Fake, *fakeKernel) {
	t.Helper()
	f := NewFake()
	k := newFakeKernel("192.168.77.10")
	return New(cfg, f, k), f, k
}

func mustSync(t *testing.T, b *Backend, st *backend.State, ch backend.Changes) {
	t.Helper()
	if err := b.Sync(context.Background(), st, ch); err != nil {
		t.Fatalf("Sync(%s): %v", ch, err)
	}
}

func key(se *localv1.ServiceEndpoints) backend.ServiceKey { return backend.KeyOf(se) }

// mustSave is the family's iptables-save output.
func mustSave(t *testing.T, k kernel, ipv6 bool) []byte {
	t.Helper()
	save, err := k.iptablesSave(t.Context(), ipv6)
	if err != nil {
		t.Fatal(err)
	}
	return save
}
