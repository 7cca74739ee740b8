package iptables

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
)

// testConfig is the default configuration with cluster CIDRs, and every
// periodic sync a full one (TestPeriodicSyncChecksTheCanary tests the
// default).
func testConfig() *Config {
	c := DefaultConfig()
	c.ClusterCIDRs = []string{"10.244.0.0/16", "fd00:10:244::/48"}
	c.FullSyncPeriod = 0
	return &c
}

func newState(ses ...*localv1.ServiceEndpoints) *backend.State {
	st := backend.NewState("node-1")
	st.Node = &localv1.Node{Name: "node-1", Addresses: []string{"192.168.77.10", "fd00:77::10"}, PodCidrs: []string{"10.244.1.0/24"}}
	st.ServiceCIDRs = []string{"10.96.0.0/16", "fd00:10:96::/112"}
	for _, se := range ses {
		st.Services[backend.KeyOf(se)] = se
	}
	return st
}

func named(name, ip string, mut func(s *localv1.Service), eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
	se := svc(name, mut, eps...)
	se.Service.ClusterIp = ip
	return se
}

func mustSync(t testing.TB, p *proxier, st *backend.State, ch backend.Changes) syncResult {
	t.Helper()
	res, err := p.sync(context.Background(), st, ch)
	if err != nil {
		t.Fatalf("sync %v: %v", ch, err)
	}
	return res
}

func TestFullSyncWritesEverythingAndJumps(t *testing.T) {
	f := newFakeTables()
	p := newProxier(false, testConfig(), f)
	st := newState(named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true)))
	res := mustSync(t, p, st, backend.Changes{Reset: true})
	if !res.full {
		t.Fatal("first sync must be full")
	}
	want := map[string]string{
		"filter INPUT": `-m conntrack --ctstate NEW -m comment --comment "kpng externally-visible service portals" -j KPNG-EXTERNAL-SERVICES
-m comment --comment "kpng health check service ports" -j KPNG-NODEPORTS
-m conntrack --ctstate NEW -m comment --comment "kpng load balancer firewall" -j KPNG-PROXY-FIREWALL
-m comment --comment "kpng localhost node port protection" -j KPNG-FIREWALL
`,
		"nat PREROUTING":  `-m comment --comment "kpng service portals" -j KPNG-SERVICES` + "\n",
		"nat POSTROUTING": `-m comment --comment "kpng postrouting rules" -j KPNG-POSTROUTING` + "\n",
		"nat KPNG-SERVICES": `-m comment --comment "ns/web:p cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KPNG-SVC-` + hashName("ns/web:p", "tcp") + `
-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KPNG-NODEPORTS
`,
		// Nothing rejects unknown ports of a cluster IP or drops unallocated
		// ones: kube-proxy's iptables mode has no such rule.
		"filter KPNG-SERVICES": "",
		"nat KPNG-POSTROUTING": `-m mark ! --mark 0x4000/0x4000 -j RETURN
-j MARK --xor-mark 0x4000
-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
`,
		"filter KPNG-FIREWALL": `-m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP` + "\n",
	}
	for k, w := range want {
		tbl, chain, _ := strings.Cut(k, " ")
		if diff := cmp.Diff(w, f.chain(tbl, chain)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}

	// A second full sync changes nothing: jumps are not duplicated.
	before := f.dump()
	mustSync(t, p, st, backend.Changes{Resync: true})
	if diff := cmp.Diff(before, f.dump()); diff != "" {
		t.Errorf("a resync of the same state changed the tables:\n%s", diff)
	}
}

func TestPartialSyncWritesOnlyWhatChanged(t *testing.T) {
	f := newFakeTables()
	p := newProxier(false, testConfig(), f)
	var ses []*localv1.ServiceEndpoints
	for i := range 50 {
		ses = append(ses, named(fmt.Sprintf("s%02d", i), fmt.Sprintf("10.96.1.%d", i), nil,
			ep(fmt.Sprintf("10.244.1.%d", i), 8080, true), ep(fmt.Sprintf("10.244.2.%d", i), 8080, false)))
	}
	st := newState(ses...)
	mustSync(t, p, st, backend.Changes{Reset: true})

	// One endpoint replaced in s07: its SVC chain, the new SEP chain and the
	// removal of the old one; the dispatch chains stay as they are.
	changed := named("s07", "10.96.1.7", nil, ep("10.244.1.7", 8080, true), ep("10.244.2.99", 8080, false))
	st.Services[backend.KeyOf(changed)] = changed
	res := mustSync(t, p, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(changed)}})
	if res.full {
		t.Fatal("an endpoint change must not be a full sync")
	}
	in := f.restores[len(f.restores)-1]
	svcChain := prefixSVC + hashName("ns/s07:p", "tcp")
	oldSEP := prefixSEP + hashName("ns/s07:p", "tcp", "10.244.2.7:8080")
	newSEP := prefixSEP + hashName("ns/s07:p", "tcp", "10.244.2.99:8080")
	keptSEP := prefixSEP + hashName("ns/s07:p", "tcp", "10.244.1.7:8080")
	for _, w := range []string{":" + svcChain, ":" + newSEP, "-X " + oldSEP, "-F " + chainCanary} {
		if !strings.Contains(in, w+"\n") && !strings.Contains(in, w+" ") {
			t.Errorf("partial restore input lacks %q:\n%s", w, in)
		}
	}
	for _, no := range []string{":" + chainServices, ":" + keptSEP, "s06", "s08"} {
		if strings.Contains(in, no) {
			t.Errorf("partial restore input has %q, which did not change:\n%s", no, in)
		}
	}
	if n := strings.Count(in, "\n"); n > 20 {
		t.Errorf("partial restore input has %d lines for one endpoint:\n%s", n, in)
	}

	// A new service rewrites the dispatch chain (as upstream does).
	added := named("zz", "10.96.2.1", nil, ep("10.244.1.200", 80, true))
	st.Services[backend.KeyOf(added)] = added
	mustSync(t, p, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(added)}})
	if in := f.restores[len(f.restores)-1]; !strings.Contains(in, ":"+chainServices+" ") {
		t.Errorf("adding a service must rewrite KPNG-SERVICES:\n%s", in)
	}
	assertSameAsFull(t, f, st)
}

// assertSameAsFull checks that the tables hold exactly what one full sync
// of st into empty tables writes.
func assertSameAsFull(t *testing.T, f *fakeTables, st *backend.State) {
	t.Helper()
	g := newFakeTables()
	q := newProxier(false, testConfig(), g)
	mustSync(t, q, st, backend.Changes{Reset: true})
	if diff := cmp.Diff(g.dump(), f.dump()); diff != "" {
		t.Fatalf("tables after partial syncs differ from a full sync (-full +partial):\n%s", diff)
	}
}

// TestPartialSyncsEqualFullSync applies random changes with partial syncs
// and checks, after each, that the tables are what a full sync writes, in
// each family.
func TestPartialSyncsEqualFullSync(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", ipv6), func(t *testing.T) {
			fam := localv1.IPFamily_IPV4
			if ipv6 {
				fam = localv1.IPFamily_IPV6
			}
			rng := rand.New(rand.NewPCG(1, 2))
			f := newFakeTables()
			p := newProxier(ipv6, testConfig(), f)
			st := newState()
			mustSync(t, p, st, backend.Changes{Reset: true})
			for step := range 300 {
				var ch backend.Changes
				for range 1 + rng.IntN(3) {
					name := fmt.Sprintf("s%d", rng.IntN(12))
					key := backend.ServiceKey{Namespace: "ns", Name: name, Family: fam}
					if rng.IntN(5) == 0 {
						delete(st.Services, key)
						ch.Deleted = append(ch.Deleted, key)
						continue
					}
					st.Services[key] = randomServiceOf(rng, name, ipv6)
					ch.Set = append(ch.Set, key)
				}
				ch = dedupe(ch)
				if res := mustSync(t, p, st, ch); res.full {
					t.Fatalf("step %d: a change-only sync was full", step)
				}
				if step%10 == 0 || step == 299 {
					g := newFakeTables()
					mustSync(t, newProxier(ipv6, testConfig(), g), st, backend.Changes{Reset: true})
					if diff := cmp.Diff(g.dump(), f.dump()); diff != "" {
						t.Fatalf("step %d: tables after partial syncs differ from a full sync (-full +partial):\n%s", step, diff)
					}
				}
			}
		})
	}
}

func dedupe(ch backend.Changes) backend.Changes {
	last := map[backend.ServiceKey]bool{}
	order := []backend.ServiceKey{}
	for _, k := range ch.Set {
		if _, ok := last[k]; !ok {
			order = append(order, k)
		}
		last[k] = true
	}
	for _, k := range ch.Deleted {
		if _, ok := last[k]; !ok {
			order = append(order, k)
		}
		last[k] = false
	}
	out := backend.Changes{}
	for _, k := range order {
		if last[k] {
			out.Set = append(out.Set, k)
		} else {
			out.Deleted = append(out.Deleted, k)
		}
	}
	return out
}

func randomService(rng *rand.Rand, name string) *localv1.ServiceEndpoints {
	return randomServiceOf(rng, name, false)
}

// randomServiceOf is a random service of either family: its addresses are
// those of randomService, mapped to IPv6 ranges when ipv6.
func randomServiceOf(rng *rand.Rand, name string, ipv6 bool) *localv1.ServiceEndpoints {
	addr := func(v4, v6 string) string {
		if ipv6 {
			return v6
		}
		return v4
	}
	var eps []*localv1.Endpoint
	for range rng.IntN(4) {
		node, host := 1+rng.IntN(2), rng.IntN(6)
		e := ep(addr(fmt.Sprintf("10.244.%d.%d", node, host), fmt.Sprintf("fd00:10:244:%d::%d", node, host)), 8080, rng.IntN(2) == 0)
		dup := false
		for _, o := range eps {
			dup = dup || o.Ip == e.Ip
		}
		if !dup {
			eps = append(eps, e)
		}
	}
	n := strings.TrimPrefix(name, "s")
	se := named(name, addr("10.96.3."+n, "fd00:10:96::3:"+n), func(s *localv1.Service) {
		if ipv6 {
			s.Family = localv1.IPFamily_IPV6
		}
		switch rng.IntN(4) {
		case 1:
			s.Type = localv1.ServiceType_NODE_PORT
			s.Ports[0].NodePort = 30000 + int32(rng.IntN(100))
		case 2:
			s.Type = localv1.ServiceType_LOAD_BALANCER
			s.Ports[0].NodePort = 31000 + int32(rng.IntN(100))
			s.LoadBalancerIps = []string{addr("203.0.113.7", "2001:db8::7")}
			if rng.IntN(2) == 0 {
				s.LoadBalancerSourceRanges = []string{addr("192.168.77.0/24", "fd00:77::/64")}
			}
		case 3:
			s.ExternalIps = []string{addr("192.0.2.1", "2001:db8::1")}
		}
		if s.Type != localv1.ServiceType_CLUSTER_IP && rng.IntN(2) == 0 {
			s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
		}
		if rng.IntN(4) == 0 {
			s.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
		}
		if rng.IntN(3) == 0 {
			s.ClientIpAffinitySeconds = 60
		}
	}, eps...)
	// Mimic the brain: the Cluster set is empty when only Local is used.
	s := se.Service
	accessible := s.Ports[0].NodePort != 0 || len(s.ExternalIps) > 0 || len(s.LoadBalancerIps) > 0
	if s.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL && !accessible {
		for _, e := range eps {
			e.InClusterSet = false
		}
	}
	return se
}

func TestCanaryTurnsPartialIntoFullSync(t *testing.T) {
	f := newFakeTables()
	p := newProxier(false, testConfig(), f)
	web := named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true))
	st := newState(web)
	mustSync(t, p, st, backend.Changes{Reset: true})

	// Someone runs iptables -t nat -F; iptables -t nat -X.
	for c := range f.tables["nat"] {
		if isBuiltin("nat", c) {
			f.tables["nat"][c] = nil
		} else {
			delete(f.tables["nat"], c)
		}
	}
	web2 := named("web", "10.96.0.10", nil, ep("10.244.1.6", 8080, true))
	st.Services[backend.KeyOf(web2)] = web2
	res := mustSync(t, p, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web2)}})
	if !res.full || !res.partialFailed {
		t.Fatalf("a flushed table must make the partial sync fail and a full one follow: %+v", res)
	}
	assertSameAsFull(t, f, st)
}

func TestFailedRestoreForcesFullSync(t *testing.T) {
	f := newFakeTables()
	p := newProxier(false, testConfig(), f)
	st := newState(named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true)))
	f.failNext = errors.New("boom")
	if _, err := p.sync(context.Background(), st, backend.Changes{Reset: true}); err == nil {
		t.Fatal("want the restore's error")
	}
	web2 := named("web", "10.96.0.10", nil, ep("10.244.1.6", 8080, true))
	st.Services[backend.KeyOf(web2)] = web2
	res := mustSync(t, p, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web2)}})
	if !res.full {
		t.Fatal("after a failure the next sync must be full")
	}
	assertSameAsFull(t, f, st)
}

func TestFullSyncRemovesStaleChainsAndJumps(t *testing.T) {
	f := newFakeTables()
	// A previous run had more services and localhost node ports.
	old := newProxier(false, testConfig(), f)
	mustSync(t, old, newState(
		named("a", "10.96.0.1", nil, ep("10.244.1.1", 80, true)),
		named("b", "10.96.0.2", nil, ep("10.244.1.2", 80, true))), backend.Changes{Reset: true})
	cfg := testConfig()
	cfg.LocalhostNodePorts = false
	p := newProxier(false, cfg, f)
	st := newState(named("a", "10.96.0.1", nil, ep("10.244.1.1", 80, true)))
	mustSync(t, p, st, backend.Changes{Reset: true})
	g := newFakeTables()
	mustSync(t, newProxier(false, cfg, g), st, backend.Changes{Reset: true})
	if diff := cmp.Diff(g.dump(), f.dump()); diff != "" {
		t.Fatalf("restart did not converge to a fresh full sync (-fresh +restarted):\n%s", diff)
	}
}

func TestCleanupRemovesEverything(t *testing.T) {
	f := newFakeTables()
	empty := f.dump()
	p := newProxier(false, testConfig(), f)
	mustSync(t, p, newState(named("web", "10.96.0.10", func(s *localv1.Service) {
		s.Type = localv1.ServiceType_LOAD_BALANCER
		s.Ports[0].NodePort = 30080
		s.LoadBalancerIps = []string{"203.0.113.7"}
		s.LoadBalancerSourceRanges = []string{"192.168.0.0/16"}
	}, ep("10.244.1.5", 8080, true))), backend.Changes{Reset: true})
	// Someone else's rule stays.
	f.tables["filter"]["INPUT"] = append(f.tables["filter"]["INPUT"], "-j ACCEPT")
	if err := cleanup(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	f.tables["filter"]["INPUT"] = f.tables["filter"]["INPUT"][:len(f.tables["filter"]["INPUT"])-1]
	if diff := cmp.Diff(empty, f.dump()); diff != "" {
		t.Fatalf("cleanup left (-empty +after):\n%s", diff)
	}
	if err := cleanup(context.Background(), f); err != nil {
		t.Fatalf("a second cleanup must be a no-op: %v", err)
	}
}

// TestPrimaryNodePortsWithoutPrimaryIP: with --nodeport-addresses=primary,
// a family for which the Node has no address (or no Node is known yet)
// accepts node ports on every local address but loopback, as kube-proxy,
// which turns "primary" into one CIDR per known primary IP and lets a
// family without a CIDR match all; once the Node has an address of the
// family, only that address does.
func TestPrimaryNodePortsWithoutPrimaryIP(t *testing.T) {
	const tail = `-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" `
	for _, tc := range []struct {
		name string
		ipv6 bool
		node *localv1.Node
		want string
	}{
		{"IPv6, the Node has only an IPv4 address", true,
			&localv1.Node{Name: "node-1", Addresses: []string{"192.168.77.10"}},
			tail + "-m addrtype --dst-type LOCAL ! -d ::1/128 -j KPNG-NODEPORTS\n"},
		{"IPv4, no Node yet", false, nil,
			tail + "-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KPNG-NODEPORTS\n"},
		{"IPv4, the Node's address is loopback", false,
			&localv1.Node{Name: "node-1", Addresses: []string{"127.0.0.1"}},
			tail + "-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KPNG-NODEPORTS\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.NodePortAddresses = []string{"primary"}
			f := newFakeTables()
			p := newProxier(tc.ipv6, cfg, f)
			st := newState()
			st.Node = tc.node
			mustSync(t, p, st, backend.Changes{Reset: true})
			if got := f.chain("nat", chainServices); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			// The Node gains an address of the family: only it accepts.
			ip := "192.168.77.10"
			if tc.ipv6 {
				ip = "fd00:77::10"
			}
			st.Node = &localv1.Node{Name: "node-1", Addresses: []string{ip}}
			mustSync(t, p, st, backend.Changes{NodeChanged: true})
			if got, want := f.chain("nat", chainServices), tail+"-d "+ip+" -j KPNG-NODEPORTS\n"; got != want {
				t.Errorf("after the Node's address: got %q, want %q", got, want)
			}
		})
	}
}

func TestNodePortAddresses(t *testing.T) {
	cfg := testConfig()
	cfg.NodePortAddresses = []string{"primary"}
	f := newFakeTables()
	p := newProxier(false, cfg, f)
	mustSync(t, p, newState(), backend.Changes{Reset: true})
	want := `-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -d 192.168.77.10 -j KPNG-NODEPORTS` + "\n"
	if got := f.chain("nat", chainServices); got != want {
		t.Errorf("primary: got %q, want %q", got, want)
	}
	if p.localhostNodePorts {
		t.Error("primary node addresses exclude localhost node ports")
	}

	cfg = testConfig()
	g := newFakeTables()
	q := newProxier(true, cfg, g)
	mustSync(t, q, newState(), backend.Changes{Reset: true})
	want = `-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL ! -d ::1/128 -j KPNG-NODEPORTS` + "\n"
	if got := g.chain("nat", chainServices); got != want {
		t.Errorf("IPv6 all: got %q, want %q", got, want)
	}
	if _, ok := g.tables["filter"][chainFirewall]; ok {
		t.Error("IPv6 has no localhost node ports, so no KPNG-FIREWALL")
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]func(c *Config){
		"masquerade bit 32":            func(c *Config) { c.MasqueradeBit = 32 },
		"primary with a CIDR":          func(c *Config) { c.NodePortAddresses = []string{"primary", "10.0.0.0/8"} },
		"bad CIDR":                     func(c *Config) { c.NodePortAddresses = []string{"10.0.0.0"} },
		"two IPv4 cluster CIDRs":       func(c *Config) { c.ClusterCIDRs = []string{"10.0.0.0/8", "11.0.0.0/8"} },
		"bridge mode without a bridge": func(c *Config) { c.DetectLocalMode = host.LocalModeBridgeInterface },
		"prefix mode without a prefix": func(c *Config) { c.DetectLocalMode = host.LocalModeInterfaceNamePrefix },
		"unknown detect-local mode":    func(c *Config) { c.DetectLocalMode = "Magic" },
		"unknown iptables mode":        func(c *Config) { c.Mode = "bpf" },
		"lock wait under a second":     func(c *Config) { c.LockWait = 0 },
		"unknown family":               func(c *Config) { c.IPFamilies = []string{"ipx"} },
	}
	for name, mut := range cases {
		c := DefaultConfig()
		mut(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := DefaultConfig()
	if err := c.validate(); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

func TestDetector(t *testing.T) {
	c := DefaultConfig()
	c.ClusterCIDRs = []string{"10.244.0.0/16", "fd00:10:244::/48"}
	for _, tc := range []struct {
		mode  string
		ipv6  bool
		local string
	}{
		{host.LocalModeClusterCIDR, false, "-s 10.244.0.0/16"},
		{"", true, "-s fd00:10:244::/48"},
		{host.LocalModeNodeCIDR, false, "-s 10.244.1.0/24"},
		{host.LocalModeNodeCIDR, true, ""},
		{host.LocalModeBridgeInterface, false, "-i kpbr0"},
		{host.LocalModeInterfaceNamePrefix, true, "-i veth+"},
	} {
		c.DetectLocalMode, c.PodBridgeInterface, c.PodInterfaceNamePrefix = tc.mode, "kpbr0", "veth"
		d := localMatch(host.DetectLocal(&c.Config, tc.ipv6, []string{"10.244.1.0/24"}))
		if got := strings.Join(d.ifLocal, " "); got != tc.local {
			t.Errorf("%s ipv6=%v: ifLocal %q, want %q", tc.mode, tc.ipv6, got, tc.local)
		}
		if tc.local != "" && strings.Join(d.ifNotLocal, " ") != "! "+tc.local {
			t.Errorf("%s ipv6=%v: ifNotLocal %q", tc.mode, tc.ipv6, d.ifNotLocal)
		}
	}
}

// TestResyncReusesTheRecord: a periodic resync renders and rewrites every
// chain; the record of a service that did not change stays as it was, that
// of a service that did (listed in the same call), and of every service
// after a node change, is new.
func TestResyncReusesTheRecord(t *testing.T) {
	f := newFakeTables()
	p := newProxier(false, testConfig(), f)
	a := named("a", "10.96.0.1", nil, ep("10.244.1.1", 80, true))
	b := named("b", "10.96.0.2", nil, ep("10.244.1.2", 80, true))
	st := newState(a, b)
	mustSync(t, p, st, backend.Changes{Reset: true})
	ka, kb := backend.KeyOf(a), backend.KeyOf(b)
	recA, recB := p.services[ka], p.services[kb]

	b2 := named("b", "10.96.0.2", nil, ep("10.244.1.3", 80, true))
	st.Services[kb] = b2
	res := mustSync(t, p, st, backend.Changes{Resync: true, Set: []backend.ServiceKey{kb}})
	if !res.full {
		t.Fatal("a resync must be a full sync")
	}
	if p.services[ka] != recA {
		t.Error("the unchanged service's record was replaced")
	}
	if p.services[kb] == recB {
		t.Error("the changed service's record was kept")
	}
	assertSameAsFull(t, f, st)

	// A node change (here: its pod CIDR, which NodeCIDR detection uses)
	// renders everything again.
	cfg := testConfig()
	cfg.DetectLocalMode = host.LocalModeNodeCIDR
	p = newProxier(false, cfg, f)
	mustSync(t, p, st, backend.Changes{Reset: true})
	recA = p.services[ka]
	st.Node.PodCidrs = []string{"10.244.9.0/24"}
	mustSync(t, p, st, backend.Changes{Resync: true, NodeChanged: true})
	if p.services[ka] == recA || !strings.Contains(f.chain("nat", prefixSVC+hashName("ns/a:p", "tcp")), "! -s 10.244.9.0/24") {
		t.Errorf("after a node change the service was not rendered for the new pod CIDR:\n%s", f.chain("nat", prefixSVC+hashName("ns/a:p", "tcp")))
	}
}

// TestPeriodicSyncChecksTheCanary: with kube-proxy's hourly full sync, a
// periodic sync only flushes the (empty) canary chains, which fails, and
// turns into a full sync, when a table was flushed; after an hour it is a
// full sync.
func TestPeriodicSyncChecksTheCanary(t *testing.T) {
	cfg := testConfig()
	cfg.FullSyncPeriod = time.Hour
	f := newFakeTables()
	p := newProxier(false, cfg, f)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p.now = func() time.Time { return clock }
	st := newState(named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true)))
	mustSync(t, p, st, backend.Changes{Reset: true})
	tables := f.dump()

	clock = clock.Add(30 * time.Second)
	res := mustSync(t, p, st, backend.Changes{Resync: true})
	want := "*filter\n-F " + chainCanary + "\nCOMMIT\n*nat\n-F " + chainCanary + "\nCOMMIT\n"
	if res.full || f.restores[len(f.restores)-1] != want {
		t.Fatalf("a periodic sync within the hour: full=%v, input:\n%s\nwant only the canary:\n%s", res.full, f.restores[len(f.restores)-1], want)
	}
	if f.dump() != tables {
		t.Fatal("the canary check changed the tables")
	}

	// Someone runs iptables -t nat -F; iptables -t nat -X.
	for c := range f.tables["nat"] {
		if isBuiltin("nat", c) {
			f.tables["nat"][c] = nil
		} else {
			delete(f.tables["nat"], c)
		}
	}
	clock = clock.Add(30 * time.Second)
	if res := mustSync(t, p, st, backend.Changes{Resync: true}); !res.full || !res.partialFailed {
		t.Fatalf("a flushed table must fail the canary check and be rebuilt: %+v", res)
	}
	assertSameAsFull(t, f, st)

	clock = clock.Add(59 * time.Minute)
	if res := mustSync(t, p, st, backend.Changes{Resync: true}); res.full {
		t.Fatal("the full sync 59 minutes ago (the repair) counts: no full sync yet")
	}
	clock = clock.Add(time.Minute)
	if res := mustSync(t, p, st, backend.Changes{Resync: true}); !res.full {
		t.Fatal("an hour after the last full sync, a periodic sync must be full")
	}
}

// fakeCounters is an nfacct that makes counters, or refuses with err.
type fakeCounters struct {
	made []string
	err  error
}

func (f *fakeCounters) Ensure(name string) error {
	f.made = append(f.made, name)
	return f.err
}

// With kube-proxy's nfacct counters made, localhost node ports and the
// INVALID drop count into them, as kube-proxy's rules do; a counter that
// cannot be made leaves its rule without the match (iptables would refuse
// the whole restore otherwise).
func TestNFAcctCounters(t *testing.T) {
	st := newState(named("np", "10.96.0.11", func(s *localv1.Service) {
		s.Type = localv1.ServiceType_NODE_PORT
		s.Ports[0].NodePort = 30080
	}, ep("10.244.1.5", 8080, true)))
	nodePorts := func(acct *fakeCounters) (nat, filter string) {
		f := newFakeTables()
		p := newProxier(false, testConfig(), f)
		p.acct = acct
		mustSync(t, p, st, backend.Changes{Reset: true})
		return f.chain("nat", chainNodePorts), f.chain("filter", chainForward)
	}
	ext := "KPNG-EXT-" + hashName("ns/np:p", "tcp")

	acct := &fakeCounters{}
	nat, filter := nodePorts(acct)
	if diff := cmp.Diff([]string{"localhost_nps_accepted_pkts", "ct_state_invalid_dropped_pkts"}, acct.made); diff != "" {
		t.Errorf("counters made (-want +got):\n%s", diff)
	}
	wantNat := `-m comment --comment "ns/np:p" -m tcp -p tcp -d 127.0.0.0/8 --dport 30080 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j ` + ext + `
-m comment --comment "ns/np:p" -m tcp -p tcp --dport 30080 -j ` + ext + "\n"
	if diff := cmp.Diff(wantNat, nat); diff != "" {
		t.Errorf("nat KPNG-NODEPORTS (-want +got):\n%s", diff)
	}
	if !strings.Contains(filter, "-m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n") {
		t.Errorf("filter KPNG-FORWARD does not count INVALID drops:\n%s", filter)
	}

	nat, filter = nodePorts(&fakeCounters{err: errors.New("no nfnetlink_acct")})
	if strings.Contains(nat+filter, "nfacct") {
		t.Errorf("rules name counters that could not be made:\n%s%s", nat, filter)
	}
	if !strings.Contains(filter, "-m conntrack --ctstate INVALID -j DROP\n") {
		t.Errorf("without its counter, the INVALID drop went:\n%s", filter)
	}
}
