package ipvs

import (
	"bytes"
	"context"
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
	jumps     map[string]bool
	setWrites int
}

func newFakeKernel(node ...string) *fakeKernel {
	k := &fakeKernel{addrs: map[netip.Addr]bool{}, sets: map[string]map[string]bool{}, rules: map[bool][]byte{}, jumps: map[string]bool{}}
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

func (k *fakeKernel) iptablesRestore(_ context.Context, ipv6 bool, script []byte) error {
	k.rules[ipv6] = bytes.Clone(script)
	return nil
}

func jumpString(ipv6 bool, j jump) string {
	f := "4"
	if ipv6 {
		f = "6"
	}
	return f + " " + j.table + " " + j.chain + " " + strings.Join(j.args, " ")
}

func (k *fakeKernel) ensureJump(_ context.Context, ipv6 bool, j jump) error {
	k.jumps[jumpString(ipv6, j)] = true
	return nil
}

func (k *fakeKernel) deleteJump(_ context.Context, ipv6 bool, j jump) error {
	delete(k.jumps, jumpString(ipv6, j))
	return nil
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
