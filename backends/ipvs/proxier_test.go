package ipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cloudflare/ipvs"
	"github.com/google/go-cmp/cmp"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

func TestFullSyncWritesKubeProxysIPVSLayout(t *testing.T) {
	web := service("default", "web", "10.96.0.10", withNodePort(30080),
		withEndpoints(ep("10.244.1.10", 8080, true), ep("10.244.2.10", 8080, false)))
	web.Service.ExternalIps = []string{"192.168.77.200"}
	web.Service.ClientIpAffinitySeconds = 10800
	local := service("default", "local", "10.96.0.11", withNodePort(30081),
		withEndpoints(ep("10.244.1.11", 8080, true), ep("10.244.2.11", 8080, false)))
	local.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	local.Service.LoadBalancerIps = []string{"203.0.113.7"}
	local.Service.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	local.Service.HealthCheckNodePort = 32000
	empty := service("default", "empty", "10.96.0.12")

	b, f, k := newTestBackend(t, testConfig())
	mustSync(t, b, stateOf(web, local, empty), backend.Changes{Reset: true})

	want := []string{
		"tcp/10.96.0.10:80 rr persistent 10800",
		"  -> 10.244.1.10:8080 w=1",
		"  -> 10.244.2.10:8080 w=1",
		"tcp/10.96.0.11:80 rr",
		"  -> 10.244.1.11:8080 w=1",
		"  -> 10.244.2.11:8080 w=1",
		"tcp/10.96.0.12:80 rr", // no endpoints: IPVS refuses (ICMP port unreachable)
		"tcp/192.168.77.10:30080 rr persistent 10800",
		"  -> 10.244.1.10:8080 w=1",
		"  -> 10.244.2.10:8080 w=1",
		"tcp/192.168.77.10:30081 rr", // Local: this node's endpoints only
		"  -> 10.244.1.11:8080 w=1",
		"tcp/192.168.77.200:80 rr persistent 10800",
		"  -> 10.244.1.10:8080 w=1",
		"  -> 10.244.2.10:8080 w=1",
		"tcp/203.0.113.7:80 rr",
		"  -> 10.244.1.11:8080 w=1",
	}
	if diff := cmp.Diff(want, f.Dump()); diff != "" {
		t.Errorf("IPVS (-want +got):\n%s", diff)
	}
	var addrs []string
	for a := range k.addrs {
		addrs = append(addrs, a.String())
	}
	slices.Sort(addrs)
	if diff := cmp.Diff([]string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "192.168.77.200", "203.0.113.7"}, addrs); diff != "" {
		t.Errorf("kube-ipvs0's addresses (-want +got):\n%s", diff)
	}
	sets := map[string][]string{
		"KPNG-CLUSTER-IP":             {"10.96.0.10,tcp:80", "10.96.0.11,tcp:80", "10.96.0.12,tcp:80"},
		"KPNG-EXTERNAL-IP":            {"192.168.77.200,tcp:80"},
		"KPNG-LOAD-BALANCER":          {"203.0.113.7,tcp:80"},
		"KPNG-LOAD-BALANCER-LOCAL":    {"203.0.113.7,tcp:80"},
		"KPNG-LOAD-BALANCER-FW":       {"203.0.113.7,tcp:80"},
		"KPNG-LB-SOURCE-CIDR":         {"203.0.113.7,tcp:80,198.51.100.0/24"},
		"KPNG-NODE-PORT-TCP":          {"30080", "30081"},
		"KPNG-NODE-PORT-LOCAL-TCP":    {"30081"},
		"KPNG-HEALTH-CHECK-NODE-PORT": {"32000"},
		"KPNG-LOOP-BACK":              {"10.244.1.10,tcp:8080,10.244.1.10", "10.244.1.11,tcp:8080,10.244.1.11"},
		"KPNG-IPVS-IPS":               {"10.96.0.10", "10.96.0.11", "10.96.0.12", "192.168.77.200", "203.0.113.7"},
	}
	for set, want := range sets {
		if diff := cmp.Diff(want, k.members(set)); diff != "" {
			t.Errorf("ipset %s (-want +got):\n%s", set, diff)
		}
	}
	rules := string(k.rules[false])
	for _, r := range []string{
		"-A KPNG-IPVS-SERVICES ! -s 10.244.0.0/16 -m set --match-set KPNG-CLUSTER-IP dst,dst -j KPNG-IPVS-MARK-MASQ",
		"-A KPNG-IPVS-MARK-MASQ -j MARK --or-mark 0x4000",
		"-A KPNG-IPVS-POSTROUTING -m set --match-set KPNG-LOOP-BACK dst,dst,src -j MASQUERADE",
		"-A KPNG-IPVS-NODE-PORT -p tcp -m set --match-set KPNG-NODE-PORT-LOCAL-TCP dst -j RETURN",
		"-A KPNG-IPVS-SOURCE-RANGES -m set --match-set KPNG-LB-SOURCE-CIDR dst,dst,src -j RETURN",
		"-A KPNG-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KPNG-IPVS-IPS dst -j REJECT",
	} {
		if !strings.Contains(rules, r+"\n") {
			t.Errorf("rules lack %q:\n%s", r, rules)
		}
	}
	if n := k.jumpCount(false); n != len(jumps) {
		t.Errorf("jumps: got %d, want %d", n, len(jumps))
	}
	if !b.LastSyncFull() {
		t.Error("the first sync is a full one")
	}
}

// syncOps syncs a change and returns the IPVS writes it made.
func syncOps(t *testing.T, b *Backend, f *Fake, st *backend.State, ch backend.Changes) []string {
	t.Helper()
	n := len(f.Ops)
	mustSync(t, b, st, ch)
	return slices.Clone(f.Ops[n:])
}

func TestOneEndpointChangeIsOneRealServerOperation(t *testing.T) {
	var services []*localv1.ServiceEndpoints
	for i := range 200 {
		services = append(services, service("ns", fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			withEndpoints(ep(fmt.Sprintf("10.244.2.%d", i%250+1), 8080, false))))
	}
	b, f, k := newTestBackend(t, testConfig())
	mustSync(t, b, stateOf(services...), backend.Changes{Reset: true})

	// One endpoint added.
	changed := service("ns", "svc-7", "10.96.0.8", withEndpoints(ep("10.244.2.8", 8080, false), ep("10.244.3.8", 8080, false)))
	services[7] = changed
	writes, saves, lists := k.setWrites, k.saves, k.setLists
	got := syncOps(t, b, f, stateOf(services...), backend.Changes{Set: []backend.ServiceKey{key(changed)}})
	if diff := cmp.Diff([]string{"create-dest tcp/10.96.0.8:80 10.244.3.8:8080 w=1"}, got); diff != "" {
		t.Errorf("endpoint added (-want +got):\n%s", diff)
	}
	if o := b.lastOps(); o.Total() != 1 || o.ListDests != 0 {
		t.Errorf("endpoint added: %+v, want one operation and no listing", o)
	}
	if k.setWrites != writes {
		t.Errorf("endpoint added: ipset written %d times", k.setWrites-writes)
	}
	if k.saves != saves || k.setLists != lists {
		t.Errorf("endpoint added: %d iptables-saves, %d listings of the sets; the periodic check is for periodic syncs", k.saves-saves, k.setLists-lists)
	}

	// One endpoint gone: TCP, so it drains with weight 0.
	changed = service("ns", "svc-7", "10.96.0.8", withEndpoints(ep("10.244.3.8", 8080, false)))
	services[7] = changed
	got = syncOps(t, b, f, stateOf(services...), backend.Changes{Set: []backend.ServiceKey{key(changed)}})
	if diff := cmp.Diff([]string{"update-dest tcp/10.96.0.8:80 10.244.2.8:8080 w=0"}, got); diff != "" {
		t.Errorf("endpoint removed (-want +got):\n%s", diff)
	}
}

func TestGracefulTermination(t *testing.T) {
	web := func(eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
		return service("default", "web", "10.96.0.10", withEndpoints(eps...))
	}
	a, c := ep("10.244.1.10", 8080, true), ep("10.244.2.10", 8080, false)
	b, f, _ := newTestBackend(t, testConfig())
	mustSync(t, b, stateOf(web(a, c)), backend.Changes{Reset: true})
	k := key(web())

	f.SetConnections("tcp/10.96.0.10:80", "10.244.2.10:8080", 1, 0)
	got := syncOps(t, b, f, stateOf(web(a)), backend.Changes{Set: []backend.ServiceKey{k}})
	if diff := cmp.Diff([]string{"update-dest tcp/10.96.0.10:80 10.244.2.10:8080 w=0"}, got); diff != "" {
		t.Errorf("endpoint gone (-want +got):\n%s", diff)
	}
	// A periodic sync while a connection lasts keeps it.
	if got := syncOps(t, b, f, stateOf(web(a)), backend.Changes{Resync: true}); len(got) != 0 {
		t.Errorf("resync with a connection: %q, want nothing", got)
	}
	f.SetConnections("tcp/10.96.0.10:80", "10.244.2.10:8080", 0, 0)
	got = syncOps(t, b, f, stateOf(web(a)), backend.Changes{Resync: true})
	if diff := cmp.Diff([]string{"remove-dest tcp/10.96.0.10:80 10.244.2.10:8080"}, got); diff != "" {
		t.Errorf("connections drained (-want +got):\n%s", diff)
	}

	// An endpoint back while it drains gets its weight back.
	f.SetConnections("tcp/10.96.0.10:80", "10.244.1.10:8080", 3, 0)
	syncOps(t, b, f, stateOf(web()), backend.Changes{Set: []backend.ServiceKey{k}})
	got = syncOps(t, b, f, stateOf(web(a)), backend.Changes{Set: []backend.ServiceKey{k}})
	if diff := cmp.Diff([]string{"update-dest tcp/10.96.0.10:80 10.244.1.10:8080 w=1"}, got); diff != "" {
		t.Errorf("endpoint back (-want +got):\n%s", diff)
	}

	// UDP real servers go at once.
	udp := func(eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
		for _, e := range eps {
			e.Protocol = localv1.Protocol_UDP
		}
		return service("default", "dns", "10.96.0.53",
			withPorts(&localv1.ServicePort{Name: "http", Protocol: localv1.Protocol_UDP, Port: 53}), withEndpoints(eps...))
	}
	syncOps(t, b, f, stateOf(web(a), udp(ep("10.244.1.53", 53, true), ep("10.244.2.53", 53, false))), backend.Changes{Set: []backend.ServiceKey{key(udp())}})
	got = syncOps(t, b, f, stateOf(web(a), udp(ep("10.244.1.53", 53, true))), backend.Changes{Set: []backend.ServiceKey{key(udp())}})
	if diff := cmp.Diff([]string{"remove-dest udp/10.96.0.53:53 10.244.2.53:53"}, got); diff != "" {
		t.Errorf("UDP endpoint gone (-want +got):\n%s", diff)
	}
}

func TestStartupRemovesWhatKubeProxyLeftAndKeepsTheRest(t *testing.T) {
	cfg := testConfig()
	cfg.ExcludeCIDRs = []string{"172.16.0.0/12"}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	b, f, k := newTestBackend(t, cfg)
	// kube-proxy's ipvs mode ran here: a stale Service, web with an old
	// endpoint (and one still draining), and someone else's virtual server.
	stale := ipvs.Service{Address: netip.MustParseAddr("10.96.9.9"), Port: 80, Protocol: ipvs.TCP, Family: ipvs.INET, Scheduler: "rr"}
	webVS := ipvs.Service{Address: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: ipvs.TCP, Family: ipvs.INET, Scheduler: "rr"}
	other := ipvs.Service{Address: netip.MustParseAddr("172.16.0.1"), Port: 443, Protocol: ipvs.TCP, Family: ipvs.INET, Scheduler: "wlc"}
	for _, s := range []ipvs.Service{stale, webVS, other} {
		if err := f.CreateService(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []struct {
		ip     string
		weight uint32
	}{{"10.244.1.10", 1}, {"10.244.1.99", 1}, {"10.244.1.98", 0}} {
		if err := f.CreateDestination(webVS, ipvs.Destination{Address: netip.MustParseAddr(d.ip), Port: 8080, Family: ipvs.INET, Weight: d.weight}); err != nil {
			t.Fatal(err)
		}
	}
	f.SetConnections("tcp/10.96.0.10:80", "10.244.1.98:8080", 2, 0)
	k.addrs[netip.MustParseAddr("10.96.9.9")] = true
	k.addrs[netip.MustParseAddr("10.96.0.10")] = true

	web := service("default", "web", "10.96.0.10", withEndpoints(ep("10.244.1.10", 8080, true)))
	got := syncOps(t, b, f, stateOf(web), backend.Changes{Reset: true})
	want := []string{
		"remove-service tcp/10.96.9.9:80",
		"update-dest tcp/10.96.0.10:80 10.244.1.99:8080 w=0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("startup (-want +got):\n%s", diff)
	}
	wantDump := []string{
		"tcp/10.96.0.10:80 rr",
		"  -> 10.244.1.10:8080 w=1",
		"  -> 10.244.1.98:8080 w=0", // still draining
		"  -> 10.244.1.99:8080 w=0",
		"tcp/172.16.0.1:443 wlc", // --ipvs-exclude-cidrs
	}
	if diff := cmp.Diff(wantDump, f.Dump()); diff != "" {
		t.Errorf("IPVS (-want +got):\n%s", diff)
	}
	if k.addrs[netip.MustParseAddr("10.96.9.9")] {
		t.Error("the stale address is still on kube-ipvs0")
	}
	// Once drained, a periodic sync removes both.
	f.SetConnections("tcp/10.96.0.10:80", "10.244.1.98:8080", 0, 0)
	got = syncOps(t, b, f, stateOf(web), backend.Changes{Resync: true})
	slices.Sort(got)
	want = []string{"remove-dest tcp/10.96.0.10:80 10.244.1.98:8080", "remove-dest tcp/10.96.0.10:80 10.244.1.99:8080"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("drained (-want +got):\n%s", diff)
	}
}

func TestPeriodicSyncRepairsIPVS(t *testing.T) {
	web := service("default", "web", "10.96.0.10", withEndpoints(ep("10.244.1.10", 8080, true)))
	b, f, k := newTestBackend(t, testConfig())
	mustSync(t, b, stateOf(web), backend.Changes{Reset: true})
	b.lastFull = b.lastFull.Add(0) // the hourly full sync is not due

	if got := syncOps(t, b, f, stateOf(web), backend.Changes{Resync: true}); len(got) != 0 || b.LastSyncFull() {
		t.Errorf("resync of an intact IPVS: %q (full: %v), want nothing", got, b.LastSyncFull())
	}
	// ipvsadm -C behind kpng's back, kube-ipvs0 emptied.
	if err := f.RemoveService(ipvs.Service{Address: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: ipvs.TCP}); err != nil {
		t.Fatal(err)
	}
	clear(k.addrs)
	mustSync(t, b, stateOf(web), backend.Changes{Resync: true})
	if !b.LastSyncFull() {
		t.Error("a resync that found IPVS changed is a full sync")
	}
	if diff := cmp.Diff([]string{"tcp/10.96.0.10:80 rr", "  -> 10.244.1.10:8080 w=1"}, f.Dump()); diff != "" {
		t.Errorf("IPVS (-want +got):\n%s", diff)
	}
	if !k.addrs[netip.MustParseAddr("10.96.0.10")] {
		t.Error("10.96.0.10 not back on kube-ipvs0")
	}
}

func TestServiceDeletedAndAddressesShared(t *testing.T) {
	// Two services share an external IP on different ports.
	a := service("default", "a", "10.96.0.1", withEndpoints(ep("10.244.1.10", 8080, true)))
	a.Service.ExternalIps = []string{"192.168.77.200"}
	c := service("default", "c", "10.96.0.2", withPorts(&localv1.ServicePort{Name: "http", Protocol: localv1.Protocol_TCP, Port: 81}))
	c.Service.ExternalIps = []string{"192.168.77.200"}
	b, f, k := newTestBackend(t, testConfig())
	mustSync(t, b, stateOf(a, c), backend.Changes{Reset: true})

	got := syncOps(t, b, f, stateOf(c), backend.Changes{Deleted: []backend.ServiceKey{key(a)}})
	slices.Sort(got)
	if diff := cmp.Diff([]string{"remove-service tcp/10.96.0.1:80", "remove-service tcp/192.168.77.200:80"}, got); diff != "" {
		t.Errorf("service deleted (-want +got):\n%s", diff)
	}
	if !k.addrs[netip.MustParseAddr("192.168.77.200")] || k.addrs[netip.MustParseAddr("10.96.0.1")] {
		t.Errorf("kube-ipvs0: %v, want 192.168.77.200 kept (c has it), 10.96.0.1 gone", k.addrs)
	}
	if diff := cmp.Diff([]string{"192.168.77.200,tcp:81"}, k.members("KPNG-EXTERNAL-IP")); diff != "" {
		t.Errorf("KPNG-EXTERNAL-IP (-want +got):\n%s", diff)
	}
}

func TestSchedulerAndAffinityChange(t *testing.T) {
	cfg := testConfig()
	cfg.Scheduler = "sh"
	web := service("default", "web", "10.96.0.10", withEndpoints(ep("10.244.1.10", 8080, true)))
	b, f, _ := newTestBackend(t, cfg)
	mustSync(t, b, stateOf(web), backend.Changes{Reset: true})
	sticky := service("default", "web", "10.96.0.10", withEndpoints(ep("10.244.1.10", 8080, true)))
	sticky.Service.ClientIpAffinitySeconds = 60
	got := syncOps(t, b, f, stateOf(sticky), backend.Changes{Set: []backend.ServiceKey{key(web)}})
	if diff := cmp.Diff([]string{"update-service tcp/10.96.0.10:80 sh timeout=60"}, got); diff != "" {
		t.Errorf("affinity set (-want +got):\n%s", diff)
	}
}

func TestCleanupRemovesEverything(t *testing.T) {
	web := service("default", "web", "10.96.0.10", withEndpoints(ep("10.244.1.10", 8080, true)))
	cfg := testConfig()
	b, f, k := newTestBackend(t, cfg)
	mustSync(t, b, stateOf(web), backend.Changes{Reset: true})
	if err := cleanupIPVS(cfg, f, k); err != nil {
		t.Fatal(err)
	}
	if err := cleanupRules(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if d := f.Dump(); len(d) != 0 {
		t.Errorf("IPVS after cleanup: %q", d)
	}
	if len(k.sets) != 0 || k.jumpCount(false) != 0 {
		t.Errorf("after cleanup: sets %v, jumps %d", k.sets, k.jumpCount(false))
	}
}

func TestLocalPolicyWithoutLocalEndpointsDrops(t *testing.T) {
	// Endpoints exist, on another node only: under the Local policy the
	// node port has no real server, and its traffic is dropped (a virtual
	// server without real servers would refuse); the cluster IP
	// (internal policy Cluster) serves the remote endpoint.
	remote := service("default", "remote", "10.96.0.30", withNodePort(30083), withEndpoints(ep("10.244.2.10", 8080, false)))
	remote.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	empty := service("default", "empty", "10.96.0.31", withNodePort(30084))
	empty.Service.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
	b, _, k := newTestBackend(t, testConfig())
	mustSync(t, b, stateOf(remote, empty), backend.Changes{Reset: true})
	if diff := cmp.Diff([]string{"192.168.77.10,tcp:30083"}, k.members("KPNG-DROP")); diff != "" {
		t.Errorf("KPNG-DROP (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(k.rules[false]), "-A KPNG-IPVS-FIREWALL -m set --match-set KPNG-DROP dst,dst -j DROP\n") {
		t.Error("no rule drops KPNG-DROP")
	}
}
