package nft

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// many returns n ClusterIP services of 2 endpoints each.
func many(n int) []*localv1.ServiceEndpoints {
	var out []*localv1.ServiceEndpoints
	for i := range n {
		out = append(out, service("bulk", fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			port("p", tcp, 80, 0, true),
			ep("p", tcp, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), 8080, "cluster"),
			ep("p", tcp, fmt.Sprintf("10.2.%d.%d", i/250, i%250+1), 8080, "cluster")))
	}
	return out
}

// TestOneEndpointChangeWritesOnlyThatService: among 100 services, an
// endpoint change rewrites only the one element of the service's endpoint
// map that held the endpoint: no rule, no chain.
func TestOneEndpointChangeWritesOnlyThatService(t *testing.T) {
	f := newFixture(t, testConfig())
	svcs := many(100)
	f.set(svcs...)

	changed := service("bulk", "svc-42", "10.96.0.43", port("p", tcp, 80, 0, true),
		ep("p", tcp, "10.1.0.43", 8080, "cluster"), ep("p", tcp, "10.3.0.43", 8080, "cluster"))
	f.set(changed)
	want := []string{
		"add element ip kpng ep-HJUOOMOWBGXZ6NQO { 32768-65535 : 10.3.0.43 . 8080 }",
		"delete element ip kpng ep-HJUOOMOWBGXZ6NQO { 32768-65535 }",
	}
	if got := txLines(f.fake4); !slices.Equal(got, want) {
		t.Errorf("transaction:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if f.fake6.LastTransaction != nil && f.fake6.LastTransaction.NumOperations() > 0 && len(f.b.Last) > 1 && f.b.Last[1].Operations > 0 {
		t.Errorf("the IPv6 table was written: %+v", f.b.Last[1])
	}

	// The same state again: nothing to write at all.
	before := f.fake4.LastTransaction
	f.set(changed)
	if f.fake4.LastTransaction != before {
		t.Errorf("an unchanged service ran a transaction: %s", f.fake4.LastTransaction)
	}
}

// TestEndpointsGoAndComeBack: the last endpoint going turns the service into
// a reject entry; its chain is emptied then deleted; coming back restores it.
func TestEndpointsGoAndComeBack(t *testing.T) {
	f := newFixture(t, testConfig())
	web := service("ns", "web", "10.96.0.5", port("http", tcp, 80, 0, true), ep("http", tcp, "10.0.2.5", 8080, "cluster"))
	f.set(web)
	full := dump(f.fake4)

	f.set(service("ns", "web", "10.96.0.5", port("http", tcp, 80, 0, false)))
	want := []string{
		`add element ip kpng no-endpoint-services { 10.96.0.5 . tcp . 80 comment "ns/web:http" : goto reject-chain }`,
		"delete element ip kpng service-ips { 10.96.0.5 . tcp . 80 }",
		"delete map ip kpng ep-7DOIQCC7AFBIJCG7",
		"flush chain ip kpng service-Y6QD5CCT-ns/web/tcp/http",
	}
	if got := txLines(f.fake4); !slices.Equal(got, want) {
		t.Errorf("transaction:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Not yet due: no deletion. Then due: one transaction deletes it.
	f.sync(backend.Changes{})
	if _, ok := f.fake4.Table.Chains["service-Y6QD5CCT-ns/web/tcp/http"]; !ok {
		t.Fatal("the chain was deleted before staleDelay")
	}
	f.clock = f.clock.Add(staleDelay)
	f.sync(backend.Changes{})
	if got, want := txLines(f.fake4), []string{"delete chain ip kpng service-Y6QD5CCT-ns/web/tcp/http"}; !slices.Equal(got, want) {
		t.Errorf("stale deletion:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	f.set(web)
	if got := dump(f.fake4); sorted(got) != sorted(full) {
		t.Errorf("after the endpoint came back the table differs:\n%s", linesNotIn(got, full))
	}
}

// TestStaleChainWantedAgain: a chain emptied and wanted again before it was
// deleted is simply refilled.
func TestStaleChainWantedAgain(t *testing.T) {
	f := newFixture(t, testConfig())
	web := service("ns", "web", "10.96.0.5", port("http", tcp, 80, 0, true), ep("http", tcp, "10.0.2.5", 8080, "cluster"))
	f.set(web)
	full := dump(f.fake4)
	f.del(backend.KeyOf(web))
	f.set(web)
	f.clock = f.clock.Add(staleDelay)
	f.sync(backend.Changes{})
	if got := dump(f.fake4); sorted(got) != sorted(full) {
		t.Errorf("table differs:\n%s", linesNotIn(got, full))
	}
}

// TestSharedElements: two services with the same pod port share its hairpin
// element; it stays while either wants it.
func TestSharedElements(t *testing.T) {
	f := newFixture(t, testConfig())
	a := service("ns", "a", "10.96.0.5", port("", tcp, 80, 0, true), ep("", tcp, "10.0.1.5", 8080, "cluster", "here"))
	b := service("ns", "b", "10.96.0.6", port("", tcp, 80, 0, true), ep("", tcp, "10.0.1.5", 8080, "cluster", "here"))
	f.set(a, b)
	f.del(backend.KeyOf(a))
	if f.fake4.Table.Sets[hairpinConnectionsSet].FindElement("10.0.1.5", "10.0.1.5", "tcp", "8080") == nil {
		t.Fatal("the hairpin element went with the first service while the second still uses it")
	}
	f.del(backend.KeyOf(b))
	if f.fake4.Table.Sets[hairpinConnectionsSet].FindElement("10.0.1.5", "10.0.1.5", "tcp", "8080") != nil {
		t.Fatal("the hairpin element outlived both services")
	}
}

// TestAffinityTimeoutChange: the affinity sets are recreated with the new
// timeout, after the rules using them are flushed (the kernel refuses to
// delete a set in use), and those rules are written again.
func TestAffinityTimeoutChange(t *testing.T) {
	f := newFixture(t, testConfig())
	sticky := richServices()[3]
	f.set(sticky)
	changed := richServices()[3]
	changed.Service.ClientIpAffinitySeconds = 60
	f.set(changed)
	tx := strings.Split(stamp.ReplaceAllString(f.fake4.LastTransaction.String(), ""), "\n")
	for _, set := range []string{"affinity-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80", "affinity-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80"} {
		del := slices.Index(tx, "delete set ip kpng "+set)
		if del < 0 {
			t.Fatalf("set %s not replaced:\n%s", set, strings.Join(tx, "\n"))
		}
		for _, c := range []string{"service-OALSTAW3-ns/sticky/tcp/", "endpoint-" + strings.TrimPrefix(set, "affinity-")} {
			flush := slices.Index(tx, "flush chain ip kpng "+c)
			readd := slices.IndexFunc(tx, func(l string) bool {
				return strings.HasPrefix(l, "add rule ip kpng "+c+" ") && strings.Contains(l, "@"+set)
			})
			if flush < 0 || flush > del || readd < del {
				t.Errorf("chain %s: flushed at %d, set deleted at %d, rule using it written at %d:\n%s", c, flush, del, readd, strings.Join(tx, "\n"))
			}
		}
	}
	for name, s := range f.fake4.Table.Sets {
		if strings.HasPrefix(name, affinitySetPrefix) && (s.Timeout == nil || s.Timeout.Seconds() != 60) {
			t.Errorf("set %s: timeout %v, want 60s", name, s.Timeout)
		}
	}
}

// TestRestartReconciles: a new backend on an up-to-date table writes
// nothing; on a table missing a change made while it was down, it writes
// only that change.
func TestRestartReconciles(t *testing.T) {
	f := newFixture(t, testConfig())
	f.set(richServices()...)
	f.set(many(20)...)

	restart := func() *fixture {
		g := newFixture(t, testConfig())
		g.fake4, g.fake6 = f.fake4, f.fake6
		g.b = NewBackend(testConfig(), newTable(ipv4, f.fake4, fakeReader(f.fake4)), newTable(ipv6, f.fake6, fakeReader(f.fake6)))
		g.b.now, g.b.interfaceAddrs = f.b.now, f.b.interfaceAddrs
		g.state = f.state
		return g
	}
	g := restart()
	before := f.fake4.LastTransaction
	g.sync(backend.Changes{})
	if f.fake4.LastTransaction != before || ops(g.b) != 0 {
		t.Fatalf("a restart rewrote an up-to-date table: %v", g.b.Last)
	}

	// While down: one service deleted, one endpoint changed.
	delete(f.state.Services, backend.KeyOf(many(20)[3]))
	se := many(20)[7]
	se.Endpoints = se.Endpoints[:1]
	f.state.Services[backend.KeyOf(se)] = se
	g = restart()
	g.sync(backend.Changes{})
	got := txLines(f.fake4)
	want := []string{
		"add element ip kpng ep-QJOKWQMQ6YEDQTLG { 0-65535 : 10.1.0.8 . 8080 }",
		`add table ip kpng { comment "rules for kpng" ; }`,
		"delete element ip kpng cluster-ips { 10.96.0.4 }",
		"delete element ip kpng ep-QJOKWQMQ6YEDQTLG { 0-32767 }",
		"delete element ip kpng ep-QJOKWQMQ6YEDQTLG { 32768-65535 }",
		"delete element ip kpng service-ips { 10.96.0.4 . tcp . 80 }",
		"delete map ip kpng ep-6BM6RQNBL4WJWLCU",
		"flush chain ip kpng service-ZVSJ32VG-bulk/svc-3/tcp/p",
	}
	if !slices.Equal(got, want) {
		t.Errorf("restart transaction:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestResyncRepairs: what is changed behind our back is put back by the
// periodic resync, and only that.
func TestResyncRepairs(t *testing.T) {
	f := newFixture(t, testConfig())
	f.set(richServices()...)
	want := dump(f.fake4)

	tx := f.fake4.NewTransaction()
	tx.Flush(&knftables.Chain{Name: servicesChain})
	tx.Delete(&knftables.Element{Set: clusterIPsSet, Key: []string{"10.96.0.5"}})
	tx.Add(&knftables.Element{Map: serviceIPsMap, Key: []string{"10.96.9.9", "tcp", "80"}, Value: []string{"drop"}})
	tx.Add(&knftables.Chain{Name: "intruder"})
	tx.Add(&knftables.Rule{Chain: masqueradingChain, Rule: "counter"})
	if err := f.fake4.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	f.sync(backend.Changes{Resync: true})
	f.clock = f.clock.Add(staleDelay)
	f.sync(backend.Changes{})
	if got := dump(f.fake4); sorted(got) != sorted(want) {
		t.Errorf("after repair the table differs:\n%s\nwant:\n%s", got, want)
	}
	f.sync(backend.Changes{Resync: true})
	if n := ops(f.b); n != 0 {
		t.Errorf("a second resync wrote %d operations", n)
	}

	// The table deleted: rebuilt whole.
	if err := deleteTable(context.Background(), f.fake4); err != nil {
		t.Fatal(err)
	}
	f.sync(backend.Changes{Resync: true})
	if got := dump(f.fake4); sorted(got) != sorted(want) {
		t.Errorf("after rebuild the table differs:\n+%s\n-%s", linesNotIn(got, want), linesNotIn(want, got))
	}
}

// TestPeriodicSyncChecksCheaply: a periodic sync within --full-sync-period
// does not read the table back; it counts the fixed chains' rules, and
// repairs the table when they differ. What the count cannot see waits for
// the next full sync.
func TestPeriodicSyncChecksCheaply(t *testing.T) {
	f := newFixture(t, testConfig())
	reads := 0
	for _, tb := range f.b.tables {
		read := tb.read
		tb.read = func(ctx context.Context) (*snapshot, error) { reads++; return read(ctx) }
	}
	f.set(richServices()...)
	want := dump(f.fake4)
	reads = 0

	f.clock = f.clock.Add(30 * time.Second)
	f.sync(backend.Changes{Resync: true})
	if reads != 0 || f.b.LastSyncFull() || ops(f.b) != 0 {
		t.Fatalf("a periodic sync of an intact table: %d reads, full %v, %d operations; want none", reads, f.b.LastSyncFull(), ops(f.b))
	}

	// An element deleted behind our back: the check does not see it...
	tx := f.fake4.NewTransaction()
	tx.Delete(&knftables.Element{Set: clusterIPsSet, Key: []string{"10.96.0.5"}})
	if err := f.fake4.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	f.sync(backend.Changes{Resync: true})
	if reads != 0 || f.b.LastSyncFull() {
		t.Fatalf("the check read the table back (%d reads) for a change it cannot see", reads)
	}
	// ...the full sync, once per --full-sync-period, repairs it.
	f.clock = f.clock.Add(time.Hour)
	f.sync(backend.Changes{Resync: true})
	if reads != 2 || !f.b.LastSyncFull() {
		t.Fatalf("after --full-sync-period: %d reads, full %v; want both tables read back", reads, f.b.LastSyncFull())
	}
	if got := dump(f.fake4); sorted(got) != sorted(want) {
		t.Errorf("after the full sync the table differs:\n+%s\n-%s", linesNotIn(got, want), linesNotIn(want, got))
	}

	// Every rule of the table flushed ("nft flush table"): the check sees
	// it at the next periodic sync, in that family only.
	reads = 0
	tx = f.fake4.NewTransaction()
	for name := range f.fake4.Table.Chains {
		tx.Flush(&knftables.Chain{Name: name})
	}
	if err := f.fake4.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	f.clock = f.clock.Add(30 * time.Second)
	f.sync(backend.Changes{Resync: true})
	if reads != 1 || !f.b.LastSyncFull() {
		t.Fatalf("a flushed table: %d reads, full %v; want the IPv4 table read back", reads, f.b.LastSyncFull())
	}
	if got := dump(f.fake4); sorted(got) != sorted(want) {
		t.Errorf("after the repair the table differs:\n+%s\n-%s", linesNotIn(got, want), linesNotIn(want, got))
	}

	// --full-sync-period=0: every periodic sync reads the tables back.
	f.b.cfg.FullSyncPeriod = 0
	reads = 0
	f.sync(backend.Changes{Resync: true})
	if reads != 2 {
		t.Errorf("--full-sync-period=0: %d reads per periodic sync, want 2", reads)
	}
}

// TestPeriodicSyncDeletesStaleChains: on a quiet cluster the chains of a
// deleted service go at the next periodic sync, not at the next change.
func TestPeriodicSyncDeletesStaleChains(t *testing.T) {
	f := newFixture(t, testConfig())
	f.set(richServices()...)
	gone := backend.KeyOf(richServices()[3])
	f.del(gone)
	if !strings.Contains(f.fake4.Dump(), gone.Namespace+"/"+gone.Name+"/") {
		t.Fatal("the deleted service's chains went at once; they must wait for the map elements to be released")
	}
	f.clock = f.clock.Add(30 * time.Second)
	f.sync(backend.Changes{Resync: true})
	if strings.Contains(f.fake4.Dump(), gone.Namespace+"/"+gone.Name+"/") {
		t.Errorf("a periodic sync left the stale chains of %v", gone)
	}
	if f.b.LastSyncFull() {
		t.Error("deleting stale chains made the periodic sync a full one")
	}
}

// failing fails its next Run, as the kernel would refuse a transaction.
type failing struct {
	*knftables.Fake
	fail bool
}

func (f *failing) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail {
		f.fail = false
		return errors.New("injected failure")
	}
	return f.Fake.Run(ctx, tx)
}

// TestFailedTransactionKeepsMirror: a failed sync changes nothing we
// remember; the driver's next call (Reset) converges.
func TestFailedTransactionKeepsMirror(t *testing.T) {
	f := newFixture(t, testConfig())
	fl := &failing{Fake: f.fake4}
	f.b.tables[0] = newTable(ipv4, fl, fakeReader(f.fake4))
	f.set(richServices()[:2]...)
	before := dump(f.fake4)
	mirror := fmt.Sprint(len(f.b.tables[0].chains), len(f.b.tables[0].claims), len(f.b.tables[0].parts))

	fl.fail = true
	se := richServices()[3]
	f.state.Services[backend.KeyOf(se)] = se
	if err := f.b.Sync(context.Background(), f.state, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(se)}}); err == nil {
		t.Fatal("Sync succeeded with a failing transaction")
	}
	if got := dump(f.fake4); got != before {
		t.Fatal("the failed transaction changed the table")
	}
	if got := fmt.Sprint(len(f.b.tables[0].chains), len(f.b.tables[0].claims), len(f.b.tables[0].parts)); got != mirror {
		t.Errorf("the mirror changed after a failure: %s, was %s", got, mirror)
	}
	f.sync(backend.Changes{Reset: true})
	if f.fake4.Table.Chains["service-OALSTAW3-ns/sticky/tcp/"] == nil {
		t.Error("the retried sync did not write the service")
	}
}

// TestNodeChange: the node's primary IP moves: node ports and the firewall's
// node exception follow.
func TestNodeChange(t *testing.T) {
	f := newFixture(t, testConfig())
	f.set(richServices()[1])
	f.state.Node = &localv1.Node{Name: "node-a", Addresses: []string{"192.168.5.10"}}
	f.sync(backend.Changes{NodeChanged: true})
	d := dump(f.fake4)
	for _, l := range []string{
		"add element ip kpng nodeport-ips { 192.168.5.10 }",
		"add rule ip kpng firewall-XI5Y37DP-ns/lb/tcp/https ip saddr != { 192.168.0.0/24, 203.0.113.0/24 } drop",
	} {
		if !strings.Contains(d, l+"\n") {
			t.Errorf("missing %q", l)
		}
	}
	if strings.Contains(d, "nodeport-ips { 192.168.0.10 }") {
		t.Error("the old node IP still accepts node ports")
	}
}

// TestFailedFullSyncIsFollowedByAFullOne: a full sync lets the mirror go
// before it reads the table back (see table.forget); when it fails, the
// next sync, whatever its changes, is a full one again and converges.
func TestFailedFullSyncIsFollowedByAFullOne(t *testing.T) {
	f := newFixture(t, testConfig())
	fl := &failing{Fake: f.fake4}
	f.b.tables[0] = newTable(ipv4, fl, fakeReader(f.fake4))
	f.set(richServices()[:2]...)

	f.b.cfg.FullSyncPeriod = 0
	fl.fail = true
	se := richServices()[3]
	f.state.Services[backend.KeyOf(se)] = se
	if err := f.b.Sync(context.Background(), f.state, backend.Changes{Resync: true, Set: []backend.ServiceKey{backend.KeyOf(se)}}); err == nil {
		t.Fatal("Sync succeeded with a failing transaction")
	}
	f.b.cfg.FullSyncPeriod = time.Hour
	f.set(richServices()[2])
	if !f.b.Last[0].Full {
		t.Errorf("the sync after a failed full one was not full: %+v", f.b.Last[0])
	}
	for _, chain := range []string{"service-OALSTAW3-ns/sticky/tcp/", "service-Y6QD5CCT-ns/web/tcp/http"} {
		if f.fake4.Table.Chains[chain] == nil {
			t.Errorf("chain %s missing after the retried sync", chain)
		}
	}
	f.sync(backend.Changes{})
	if n := ops(f.b); n != 0 {
		t.Errorf("a sync after convergence wrote %d operations", n)
	}
}

// TestReplacedEndpointKeepsTheOthersSlots: a pod replaced by one whose
// address sorts elsewhere among the service's endpoints (given in address
// order, as the brain sorts them) rewrites the one
// slot of the endpoint map that held the old pod, not every slot whose
// endpoint's rank moved; a restart finds the slots as the kernel holds them
// and writes nothing; a new number of endpoints deals the slots afresh.
func TestReplacedEndpointKeepsTheOthersSlots(t *testing.T) {
	f := newFixture(t, testConfig())
	web := func(ips ...string) *localv1.ServiceEndpoints {
		opts := []svcOpt{port("http", tcp, 80, 0, true)}
		for _, ip := range ips {
			opts = append(opts, ep("http", tcp, ip, 8080, "cluster"))
		}
		return service("ns", "web", "10.96.0.5", opts...)
	}
	f.set(web("10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"))
	m := endpointMapName(clusterChainPrefix + portBaseName("ns", "web", "tcp", "http"))

	f.set(web("10.1.0.1", "10.1.0.3", "10.1.0.4", "10.9.0.9"))
	want := []string{
		"add element ip kpng " + m + " { 16384-32767 : 10.9.0.9 . 8080 }",
		"delete element ip kpng " + m + " { 16384-32767 }",
	}
	if got := txLines(f.fake4); !slices.Equal(got, want) {
		t.Errorf("transaction:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	g := newFixture(t, testConfig())
	g.fake4, g.fake6 = f.fake4, f.fake6
	g.b = NewBackend(testConfig(), newTable(ipv4, f.fake4, fakeReader(f.fake4)), newTable(ipv6, f.fake6, fakeReader(f.fake6)))
	g.b.now, g.b.interfaceAddrs = f.b.now, f.b.interfaceAddrs
	g.state = f.state
	before := f.fake4.LastTransaction
	g.sync(backend.Changes{})
	if f.fake4.LastTransaction != before || ops(g.b) != 0 {
		t.Fatalf("a restart rewrote the endpoint map's slots: %v\n%s", g.b.Last, strings.Join(txLines(f.fake4), "\n"))
	}

	g.set(web("10.1.0.0", "10.1.0.1", "10.1.0.3", "10.1.0.4", "10.9.0.9"))
	got := strings.Join(txLines(f.fake4), "\n")
	for _, e := range []string{"0-13106 : 10.1.0.0 . 8080", "13107-26213 : 10.1.0.1 . 8080", "52428-65535 : 10.9.0.9 . 8080"} {
		if !strings.Contains(got, e) {
			t.Errorf("five endpoints: %q not written in the endpoints' order:\n%s", e, got)
		}
	}
}

// keepSlots keeps each held endpoint in its slot and fills the others in
// order, with few endpoints (a scan) and many (a lookup), duplicates
// included.
func TestKeepSlots(t *testing.T) {
	for _, n := range []int{5, 40} {
		els := make([]elem, n)
		held := map[elemID]string{}
		for i := range els {
			els[i] = elem{elemID: elemID{"m", endpointSlot(i, n)}, isMap: true, value: fmt.Sprintf("v%03d", i/2)} // each value twice
			if i%3 == 0 {
				// Slot i held the value of endpoint n-1-i.
				held[els[i].elemID] = fmt.Sprintf("v%03d", (n-1-i)/2)
			}
		}
		held[els[1].elemID] = "gone"
		values := make([]string, n)
		for i := range els {
			values[i] = els[i].value
		}
		got := slices.Clone(els)
		keepSlots(got, func(id elemID) (string, bool) {
			v, ok := held[id]
			return v, ok
		})
		if g, w := slices.Sorted(slices.Values(valuesOf(got))), slices.Sorted(slices.Values(values)); !slices.Equal(g, w) {
			t.Fatalf("n=%d: values %v are not a permutation of %v", n, g, w)
		}
		free := []string{}
		for s := range got {
			if got[s].elemID != els[s].elemID {
				t.Fatalf("n=%d: slot %d's key changed: %v", n, s, got[s].elemID)
			}
			if v, ok := held[got[s].elemID]; ok && s != 1 {
				if got[s].value != v {
					t.Errorf("n=%d: slot %d held %q, got %q", n, s, v, got[s].value)
				}
				continue
			}
			free = append(free, got[s].value)
		}
		// The free slots take the unheld endpoints in order.
		if !slices.IsSorted(free) {
			t.Errorf("n=%d: free slots not filled in order: %v", n, free)
		}

		same := slices.Clone(els)
		keepSlots(same, func(elemID) (string, bool) { return "", false })
		if !slices.Equal(same, els) {
			t.Errorf("n=%d: nothing held, slots dealt anew: %v", n, same)
		}
	}
}

func valuesOf(els []elem) []string {
	out := make([]string, len(els))
	for i := range els {
		out[i] = els[i].value
	}
	return out
}
