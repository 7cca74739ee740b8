package ebpf

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// svc builds a view entry: a ClusterIP Service with one TCP port 80 named
// "http" and the given endpoints (IP:port, all in the cluster set).
func svc(name, clusterIP string, eps ...string) *localv1.ServiceEndpoints {
	se := &localv1.ServiceEndpoints{Service: &localv1.Service{
		Namespace: "default", Name: name, Family: localv1.IPFamily_IPV4, Type: localv1.ServiceType_CLUSTER_IP,
		ClusterIp: clusterIP,
		Ports:     []*localv1.ServicePort{{Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, HasEndpoints: len(eps) > 0}},
	}}
	for _, e := range eps {
		ap := netip.MustParseAddrPort(e)
		se.Endpoints = append(se.Endpoints, &localv1.Endpoint{PortName: "http", Protocol: localv1.Protocol_TCP,
			Ip: ap.Addr().String(), Port: int32(ap.Port()), Ready: true, Serving: true, InClusterSet: true})
	}
	return se
}

func fe(s string, proto uint8) Frontend {
	ap := netip.MustParseAddrPort(s)
	return Frontend{Addr: ap.Addr(), Port: ap.Port(), Proto: proto}
}

func aps(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

// harness drives a Dataplane on FakeMaps as backend.Run would: the first
// sync is a reset, then the keys that changed.
type harness struct {
	t     *testing.T
	fake  *FakeMaps
	d     *Dataplane
	state *backend.State
	first bool
}

func newHarness(t *testing.T, fake *FakeMaps) *harness {
	if fake == nil {
		fake = NewFakeMaps()
	}
	return &harness{t: t, fake: fake, d: NewDataplane(fake), state: backend.NewState("node-1"), first: true}
}

// sync sets (or, for a name alone, deletes) Services and syncs.
func (h *harness) sync(set []*localv1.ServiceEndpoints, deleted ...string) error {
	h.t.Helper()
	var ch backend.Changes
	for _, se := range set {
		k := backend.KeyOf(se)
		h.state.Services[k] = se
		ch.Set = append(ch.Set, k)
	}
	for _, name := range deleted {
		k := backend.ServiceKey{Namespace: "default", Name: name, Family: localv1.IPFamily_IPV4}
		delete(h.state.Services, k)
		ch.Deleted = append(ch.Deleted, k)
	}
	ch.Reset, h.first = h.first, false
	h.fake.Ops = nil
	err := h.d.Sync(context.Background(), h.state, ch)
	if h.fake.Broken != nil {
		h.t.Fatalf("a frontend lacked its endpoints: %v\nops:\n%s", h.fake.Broken, strings.Join(h.fake.Ops, "\n"))
	}
	return err
}

func (h *harness) mustSync(set []*localv1.ServiceEndpoints, deleted ...string) {
	h.t.Helper()
	if err := h.sync(set, deleted...); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) wantEndpoints(f Frontend, want ...string) {
	h.t.Helper()
	got, ok := h.fake.Resolve(f)
	if !ok {
		h.t.Fatalf("%s: no frontend", f)
	}
	if !slices.Equal(got, aps(want...)) {
		h.t.Errorf("%s: endpoints %v, want %v", f, got, want)
	}
}

// wantOrder checks that the ops matching each prefix come in this order.
func (h *harness) wantOrder(prefixes ...string) {
	h.t.Helper()
	last := -1
	for _, p := range prefixes {
		i := slices.IndexFunc(h.fake.Ops, func(op string) bool { return strings.HasPrefix(op, p) })
		if i < 0 {
			h.t.Fatalf("no %q in ops:\n%s", p, strings.Join(h.fake.Ops, "\n"))
		}
		if i < last {
			h.t.Fatalf("%q comes before the previous step, ops:\n%s", p, strings.Join(h.fake.Ops, "\n"))
		}
		last = i
	}
}

func TestEndpointChangesNeverLeaveAServiceWithoutBackends(t *testing.T) {
	h := newHarness(t, nil)
	web := fe("10.96.0.10:80", protoTCP)
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080", "10.0.1.2:8080")})
	h.wantEndpoints(web, "10.0.1.1:8080", "10.0.1.2:8080")

	steps := []struct {
		name string
		eps  []string
	}{
		{"one endpoint added", []string{"10.0.1.1:8080", "10.0.1.2:8080", "10.0.1.3:8080"}},
		{"two removed", []string{"10.0.1.3:8080"}},
		{"the last one replaced", []string{"10.0.1.4:8080"}},
		{"scaled up from one", []string{"10.0.1.4:8080", "10.0.1.5:8080", "10.0.1.6:8080", "10.0.1.7:8080"}},
	}
	for _, s := range steps {
		h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", s.eps...)})
		h.wantEndpoints(web, s.eps...)
		// The new set first, then the switch, then the old set goes.
		h.wantOrder("put-set", "put-service 10.96.0.10:80/tcp", "delete-set")
		if len(h.fake.Ops) != 3 {
			t.Errorf("%s: %d operations, want 3:\n%s", s.name, len(h.fake.Ops), strings.Join(h.fake.Ops, "\n"))
		}
	}
	if n := len(h.fake.Slots); n != 4 {
		t.Errorf("%d slots in the maps, want the 4 of the current set (old sets deleted)", n)
	}

	// An unchanged Service writes nothing.
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", steps[len(steps)-1].eps...)})
	if len(h.fake.Ops) != 0 {
		t.Errorf("an unchanged Service wrote %v", h.fake.Ops)
	}
}

func TestNoEndpointsRefusesAndDeletedServiceIsGone(t *testing.T) {
	h := newHarness(t, nil)
	web := fe("10.96.0.10:80", protoTCP)
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080")})
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10")})
	v := h.fake.Services[web]
	if v.Count != 0 || v.Drop {
		t.Errorf("no endpoints anywhere: %+v, want count 0 and refused (not dropped)", v)
	}
	if len(h.fake.Slots) != 0 {
		t.Errorf("slots left: %v", h.fake.Slots)
	}
	h.wantOrder("put-service", "delete-set")

	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.2:8080")})
	h.wantEndpoints(web, "10.0.1.2:8080")
	h.mustSync(nil, "web")
	if len(h.fake.Services) != 0 || len(h.fake.Slots) != 0 {
		t.Errorf("after the delete: services %v slots %v", h.fake.Services, h.fake.Slots)
	}
	h.wantOrder("delete-service", "delete-set")
}

func TestResetAdoptsWhatAnEarlierRunPinned(t *testing.T) {
	// An earlier run left web on set 1 (an old endpoint) and a Service
	// since deleted on set 2.
	fake := NewFakeMaps()
	fake.PutSet(1, aps("10.0.1.9:8080"), false)
	fake.PutService(fe("10.96.0.10:80", protoTCP), ServiceValue{Set: 1, Count: 1})
	fake.PutSet(2, aps("10.0.2.1:53"), false)
	fake.PutService(fe("10.96.0.53:53", protoUDP), ServiceValue{Set: 2, Count: 1})

	h := newHarness(t, fake)
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080")})
	h.wantEndpoints(fe("10.96.0.10:80", protoTCP), "10.0.1.1:8080")
	if v := fake.Services[fe("10.96.0.10:80", protoTCP)]; v.Set == 1 || v.Set == 2 {
		t.Errorf("the new set reused id %d, still in use by the kernel during the reset", v.Set)
	}
	if _, ok := fake.Services[fe("10.96.0.53:53", protoUDP)]; ok {
		t.Error("the stale frontend is still there")
	}
	if len(fake.Slots) != 1 {
		t.Errorf("slots %v, want the new set's one", fake.Slots)
	}
	// web switched from its old set to the new one with no gap.
	h.wantOrder("put-set", "put-service 10.96.0.10:80/tcp", "delete-service 10.96.0.53:53/udp", "delete-set")
}

func TestFailedWriteIsRepairedByTheNextReset(t *testing.T) {
	h := newHarness(t, nil)
	web := fe("10.96.0.10:80", protoTCP)
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080")})
	h.fake.Err = errors.New("map full")
	if err := h.sync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.2:8080")}); err == nil {
		t.Fatal("the failed write was not reported")
	}
	h.wantEndpoints(web, "10.0.1.1:8080") // the old set still serves
	h.first = true                        // the driver resets after a failure
	h.mustSync(nil)
	h.wantEndpoints(web, "10.0.1.2:8080")
	if len(h.fake.Slots) != 1 {
		t.Errorf("slots %v", h.fake.Slots)
	}
}

func TestResyncRepairsAFrontendChangedBehindOurBack(t *testing.T) {
	h := newHarness(t, nil)
	web := fe("10.96.0.10:80", protoTCP)
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080")})
	delete(h.fake.Services, web)
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err != nil {
		t.Fatal(err)
	}
	h.wantEndpoints(web, "10.0.1.1:8080")
	if !h.d.LastSyncFull() {
		t.Error("the repair is not reported as a full sync")
	}
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err != nil {
		t.Fatal(err)
	}
	if h.d.LastSyncFull() {
		t.Error("a resync that found nothing to repair is reported as full")
	}
}

func TestResyncRepairsSlotsChangedBehindOurBack(t *testing.T) {
	h := newHarness(t, nil)
	web, db := fe("10.96.0.10:80", protoTCP), fe("10.96.0.20:80", protoTCP)
	aff := svc("db", "10.96.0.20", "10.0.2.1:8080", "10.0.2.2:8080")
	aff.Service.ClientIpAffinitySeconds = 10800
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080", "10.0.1.2:8080"), aff})
	resync := func() {
		t.Helper()
		h.fake.Ops = nil
		if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err != nil {
			t.Fatal(err)
		}
		if h.fake.Broken != nil {
			t.Fatalf("a frontend lacked its endpoints: %v\nops:\n%s", h.fake.Broken, strings.Join(h.fake.Ops, "\n"))
		}
	}
	resync()
	if len(h.fake.Ops) != 0 {
		t.Fatalf("a resync with nothing changed wrote: %v", h.fake.Ops)
	}
	before := maps.Clone(h.fake.Services)
	wset, dset := before[web].Set, before[db].Set
	// By hand: a slot deleted, a slot and a membership entry changed.
	delete(h.fake.Slots, [2]uint32{wset, 0})
	h.fake.Slots[[2]uint32{dset, 1}] = netip.MustParseAddrPort("10.9.9.9:1")
	delete(h.fake.Members[dset], netip.MustParseAddrPort("10.0.2.1:8080"))
	resync()
	h.wantEndpoints(web, "10.0.1.1:8080", "10.0.1.2:8080")
	h.wantEndpoints(db, "10.0.2.1:8080", "10.0.2.2:8080")
	if m := h.fake.Members[dset]; len(m) != 2 || m[netip.MustParseAddrPort("10.0.2.1:8080")] != 0 || m[netip.MustParseAddrPort("10.0.2.2:8080")] != 1 {
		t.Errorf("members of set %d: %v", dset, m)
	}
	// Repaired in place: the same sets, rewritten; nothing deleted, no
	// frontend switched, and not reported as a full sync.
	if !maps.Equal(h.fake.Services, before) {
		t.Errorf("frontends changed: %v, were %v", h.fake.Services, before)
	}
	slices.Sort(h.fake.Ops)
	if want := []string{fmt.Sprintf("put-set %d [10.0.1.1:8080 10.0.1.2:8080]", wset), fmt.Sprintf("put-set %d [10.0.2.1:8080 10.0.2.2:8080]", dset)}; !slices.Equal(h.fake.Ops, slices.Sorted(slices.Values(want))) {
		t.Errorf("ops %v, want %v", h.fake.Ops, want)
	}
	if h.d.LastSyncFull() {
		t.Error("an in-place repair of sets is reported as a full sync")
	}
	// Entries of sets kpng did not write are no damage of its own.
	h.fake.Slots[[2]uint32{1000, 0}] = netip.MustParseAddrPort("10.9.9.9:1")
	resync()
	if len(h.fake.Ops) != 0 {
		t.Errorf("a set kpng did not write was repaired: %v", h.fake.Ops)
	}
	// A failed repair fails the sync (the driver's next call resets).
	delete(h.fake.Slots, [2]uint32{wset, 1})
	h.fake.Ops = nil
	h.fake.Err = errors.New("map full")
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err == nil {
		t.Error("a failed read-back was not reported")
	}
}

// A set id can be any number: a reset releases the ids of the stale sets
// it deletes, and the next new set may take one.
func TestResyncRepairsASetOfAnyID(t *testing.T) {
	fake := NewFakeMaps()
	const big = 0xf000_0000
	fake.Slots[[2]uint32{big, 0}] = netip.MustParseAddrPort("10.9.9.9:1") // no frontend names it
	h := newHarness(t, fake)
	web := fe("10.96.0.10:80", protoTCP)
	h.mustSync(nil) // the reset deletes set big and releases its id
	if _, ok := fake.Slots[[2]uint32{big, 0}]; ok {
		t.Fatal("the reset left the stale set")
	}
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080")})
	id := fake.Services[web].Set
	if id != big {
		t.Fatalf("the new set took id %d, not the released %d: the case is not exercised", id, big)
	}
	delete(fake.Slots, [2]uint32{id, 0})
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err != nil {
		t.Fatal(err)
	}
	h.wantEndpoints(web, "10.0.1.1:8080")
}

// fakeLinks is a LinkChecker that counts its calls.
type fakeLinks struct {
	calls int
	err   error
}

func (f *fakeLinks) CheckLinks() ([]string, error) {
	f.calls++
	return []string{"connect4: repaired"}, f.err
}

func TestResyncChecksTheLinks(t *testing.T) {
	h := newHarness(t, nil)
	links := &fakeLinks{}
	h.d.SetLinkChecker(links)
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.1:8080")})
	h.mustSync([]*localv1.ServiceEndpoints{svc("web", "10.96.0.10", "10.0.1.2:8080")})
	if links.calls != 0 {
		t.Errorf("links checked %d times by a reset and a change", links.calls)
	}
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err != nil {
		t.Fatal(err)
	}
	if links.calls != 1 {
		t.Errorf("links checked %d times by a resync", links.calls)
	}
	// A link that cannot be repaired is logged; the maps' sync goes on.
	links.err = errors.New("interface eth9: no such network interface")
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err != nil {
		t.Errorf("a link's failure failed the sync: %v", err)
	}
}

func TestAffinityKeepsItsIDAndWritesMembers(t *testing.T) {
	h := newHarness(t, nil)
	web := fe("10.96.0.10:80", protoTCP)
	se := svc("web", "10.96.0.10", "10.0.1.1:8080", "10.0.1.2:8080")
	se.Service.ClientIpAffinitySeconds = 10800
	h.mustSync([]*localv1.ServiceEndpoints{se})
	v := h.fake.Services[web]
	if v.AffinitySec != 10800 || v.AffinityID == 0 {
		t.Fatalf("affinity not written: %+v", v)
	}
	if m := h.fake.Members[v.Set]; len(m) != 2 {
		t.Errorf("members of set %d: %v", v.Set, m)
	}
	se2 := svc("web", "10.96.0.10", "10.0.1.2:8080", "10.0.1.3:8080")
	se2.Service.ClientIpAffinitySeconds = 10800
	h.mustSync([]*localv1.ServiceEndpoints{se2})
	v2 := h.fake.Services[web]
	if v2.AffinityID != v.AffinityID {
		t.Errorf("affinity id changed with the endpoints: %d then %d", v.AffinityID, v2.AffinityID)
	}
	if len(h.fake.Members) != 1 {
		t.Errorf("members of old sets left: %v", h.fake.Members)
	}
}

func TestNodeChangeMovesNodePorts(t *testing.T) {
	h := newHarness(t, nil)
	se := svc("web", "10.96.0.10", "10.0.1.1:8080")
	se.Service.Type = localv1.ServiceType_NODE_PORT
	se.Service.Ports[0].NodePort = 30080
	h.state.Node = &localv1.Node{Name: "node-1", Addresses: []string{"192.168.0.1"}}
	h.mustSync([]*localv1.ServiceEndpoints{se})
	h.wantEndpoints(fe("192.168.0.1:30080", protoTCP), "10.0.1.1:8080")

	h.state.Node = &localv1.Node{Name: "node-1", Addresses: []string{"192.168.0.2"}}
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{NodeChanged: true}); err != nil {
		t.Fatal(err)
	}
	h.wantEndpoints(fe("192.168.0.2:30080", protoTCP), "10.0.1.1:8080")
	out := fe("192.168.0.2:30080", protoTCP)
	out.Outside = true
	h.wantEndpoints(out, "10.0.1.1:8080")
	for f := range h.fake.Services {
		if f.Addr == netip.MustParseAddr("192.168.0.1") {
			t.Errorf("the old node address still has the node port: %s", f)
		}
	}
}

func TestFrontendClaimedTwiceKeepsTheFirst(t *testing.T) {
	h := newHarness(t, nil)
	a := svc("a", "10.96.0.10", "10.0.1.1:8080")
	a.Service.ExternalIps = []string{"203.0.113.1"}
	b := svc("b", "10.96.0.11", "10.0.2.1:8080")
	b.Service.ExternalIps = []string{"203.0.113.1"}
	h.mustSync([]*localv1.ServiceEndpoints{a, b})
	h.wantEndpoints(fe("203.0.113.1:80", protoTCP), "10.0.1.1:8080")
	if len(h.d.Conflicts) != 2 { // for the node's sockets, and from outside
		t.Errorf("conflicts: %v", h.d.Conflicts)
	}
	h.mustSync(nil, "b")
	h.wantEndpoints(fe("203.0.113.1:80", protoTCP), "10.0.1.1:8080")
}

// TestSourceRangesAreWrittenBeforeTheFrontendFilters: a load-balancer IP's
// outside frontend gets its loadBalancerSourceRanges before it filters on
// them and loses them only after it stopped (FakeMaps checks that a
// filtering frontend always has some); a reset deletes the ranges no
// frontend has.
func TestSourceRangesAreWrittenBeforeTheFrontendFilters(t *testing.T) {
	fake := NewFakeMaps()
	stale := Frontend{Addr: netip.MustParseAddr("198.51.100.9"), Port: 80, Proto: protoTCP, Outside: true}
	fake.Ranges[stale] = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} // an earlier run's
	h := newHarness(t, fake)
	lb := func(ranges ...string) *localv1.ServiceEndpoints {
		se := svc("lb", "10.96.0.10", "10.0.1.1:8080")
		se.Service.Type = localv1.ServiceType_LOAD_BALANCER
		se.Service.LoadBalancerIps = []string{"198.51.100.1"}
		se.Service.ExternalIps = []string{"203.0.113.1"}
		se.Service.LoadBalancerSourceRanges = ranges
		return se
	}
	lbOut := Frontend{Addr: netip.MustParseAddr("198.51.100.1"), Port: 80, Proto: protoTCP, Outside: true}
	extOut := Frontend{Addr: netip.MustParseAddr("203.0.113.1"), Port: 80, Proto: protoTCP, Outside: true}
	want := func(f Frontend, ranges ...string) {
		t.Helper()
		var ps []netip.Prefix
		for _, r := range ranges {
			ps = append(ps, netip.MustParsePrefix(r))
		}
		if got := fake.Ranges[f]; !slices.Equal(got, ps) {
			t.Errorf("%s: ranges %v, want %v", f, got, ps)
		}
		if fake.Services[f].SourceRanges != (len(ps) > 0) {
			t.Errorf("%s: filters %v with ranges %v", f, fake.Services[f].SourceRanges, ps)
		}
	}

	h.mustSync([]*localv1.ServiceEndpoints{lb("192.0.2.0/24", "10.1.0.0/16")})
	want(lbOut, "10.1.0.0/16", "192.0.2.0/24")
	want(extOut) // external IPs are not filtered, as kube-proxy
	want(stale)  // the earlier run's ranges are gone
	h.wantOrder("put-ranges "+lbOut.String(), "put-service "+lbOut.String())

	h.mustSync([]*localv1.ServiceEndpoints{lb("192.0.2.0/24", "172.16.0.0/12")})
	want(lbOut, "172.16.0.0/12", "192.0.2.0/24")

	h.mustSync([]*localv1.ServiceEndpoints{lb()})
	want(lbOut)
	h.wantOrder("put-service "+lbOut.String(), "delete-ranges "+lbOut.String())

	h.mustSync([]*localv1.ServiceEndpoints{lb("0.0.0.0/0")}) // everyone: no filter
	want(lbOut)

	h.mustSync([]*localv1.ServiceEndpoints{lb("192.0.2.0/24")})
	h.mustSync(nil, "lb")
	if len(fake.Ranges) != 0 {
		t.Errorf("ranges left after the Service went: %v", fake.Ranges)
	}
}

// With --nodeport-addresses CIDRs, the node ports are on the host's
// addresses within them (never loopback), read again at a resync.
func TestNodePortAddressesFollowTheHostsAddresses(t *testing.T) {
	h := newHarness(t, nil)
	host := []netip.Addr{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("192.168.0.7"),
		netip.MustParseAddr("10.1.1.1"), netip.MustParseAddr("127.0.0.1")}
	h.d.NodePorts = NewNodePortAddrs([]string{"192.168.0.0/24", "127.0.0.0/8"})
	h.d.NodePorts.InterfaceAddrs = func() ([]netip.Addr, error) { return slices.Clone(host), nil }
	se := svc("web", "10.96.0.10", "10.0.1.1:8080")
	se.Service.Type = localv1.ServiceType_NODE_PORT
	se.Service.Ports[0].NodePort = 30080
	h.state.Node = &localv1.Node{Name: "node-1", Addresses: []string{"192.168.0.1"}}
	h.mustSync([]*localv1.ServiceEndpoints{se})
	nodePorts := func() []string {
		var out []string
		for f := range h.fake.Services {
			if f.Port == 30080 && !f.Outside {
				out = append(out, f.Addr.String())
			}
		}
		slices.Sort(out)
		return out
	}
	if got, want := nodePorts(), []string{"192.168.0.1", "192.168.0.7"}; !slices.Equal(got, want) {
		t.Fatalf("node ports on %v, want %v", got, want)
	}

	host = slices.Delete(host, 1, 2) // 192.168.0.7 goes away
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err != nil {
		t.Fatal(err)
	}
	if got, want := nodePorts(), []string{"192.168.0.1"}; !slices.Equal(got, want) {
		t.Errorf("after the address went: node ports on %v, want %v", got, want)
	}

	h.d.NodePorts.InterfaceAddrs = func() ([]netip.Addr, error) { return nil, errors.New("netlink is down") }
	if err := h.d.Sync(context.Background(), h.state, backend.Changes{Resync: true}); err == nil || !strings.Contains(err.Error(), "node port addresses: netlink is down") {
		t.Errorf("a failed address listing: err = %v, want it named", err)
	}
}

// --ip-families ipv4: an IPv6 Service is not written, and one written
// before (pinned by a run with both families) is deleted.
func TestFamiliesLeaveTheOtherFamilyOut(t *testing.T) {
	fake := NewFakeMaps()
	h := newHarness(t, fake)
	v6 := svc("web6", "fd00::10", "[fd00:1::1]:8080")
	v6.Service.Family = localv1.IPFamily_IPV6
	v6.Endpoints[0].Ip = "fd00:1::1"
	h.mustSync([]*localv1.ServiceEndpoints{v6, svc("web", "10.96.0.10", "10.0.1.1:8080")})
	h.wantEndpoints(fe("[fd00::10]:80", protoTCP), "[fd00:1::1]:8080")

	h = newHarness(t, fake) // a restart, with IPv4 only
	h.d.Families = []localv1.IPFamily{localv1.IPFamily_IPV4}
	h.mustSync([]*localv1.ServiceEndpoints{v6, svc("web", "10.96.0.10", "10.0.1.1:8080")})
	if _, ok := fake.Resolve(fe("[fd00::10]:80", protoTCP)); ok {
		t.Error("the IPv6 Service is still in the maps with --ip-families ipv4")
	}
	h.wantEndpoints(fe("10.96.0.10:80", protoTCP), "10.0.1.1:8080")
}
