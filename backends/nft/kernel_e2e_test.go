//go:build e2e

package nft

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"
)

// inNetns runs fn on a thread in a new network namespace (so the nft
// processes it starts are too); the namespace goes with the test.
func inNetns(t testing.TB, fn func(ns *netnstest.Netns)) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("the nft command is required: %v", err)
	}
	ns := netnstest.New(t, "nft")
	if err := ns.Do(func() error { fn(ns); return nil }); err != nil {
		t.Fatal(err)
	}
}

// nftIn runs nft in the namespace.
func nftIn(t *testing.T, ns *netnstest.Netns, args ...string) string {
	t.Helper()
	out, err := ns.Run(append([]string{"nft"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// realFixture is a backend on the real tables of the current namespace,
// writing incremental transactions through netlink.
func realFixture(t *testing.T) *fixture {
	t.Helper()
	return realFixtureWith(t, testConfig(), true)
}

// realFixtureWith is realFixture with a configuration, and netlink or not.
func realFixtureWith(t *testing.T, cfg Config, netlink bool) *fixture {
	t.Helper()
	f := newFixture(t, cfg)
	var tables []*table
	for _, fam := range []family{ipv4, ipv6} {
		nft, err := knftables.New(fam.nft, "kpng")
		if err != nil {
			t.Fatalf("knftables.New(%s): %v", fam.nft, err)
		}
		tb := newTable(fam, nftCommand{nft}, nftReader(fam.nft, "kpng"))
		tb.count = netlinkCounter(fam, "kpng")
		if netlink {
			tb.nl = newNLTable(fam, "kpng")
			t.Cleanup(tb.nl.close)
		}
		tables = append(tables, tb)
	}
	b := NewBackend(f.b.cfg, tables...)
	b.now, b.interfaceAddrs = f.b.now, f.b.interfaceAddrs
	f.b = b
	return f
}

// TestKernel runs the backend against real nftables in a namespace of its
// own: the kernel accepts every kind of rule we write, what we read back
// matches what we wrote, a restart reconciles without rewriting, and a
// resync repairs what was changed behind our back.
func TestKernel(t *testing.T) {
	inNetns(t, func(ns *netnstest.Netns) {
		ctx := context.Background()
		f := realFixture(t)
		f.set(richServices()...)
		if ops(f.b) == 0 {
			t.Fatal("the first sync wrote nothing")
		}
		listing := nftIn(t, ns, "list", "ruleset")
		for _, want := range []string{"table ip kpng", "table ip6 kpng", "numgen random mod 2", "fib saddr type local", "update @affinity-"} {
			if !strings.Contains(listing, want) {
				t.Errorf("the kernel's ruleset lacks %q:\n%s", want, listing)
			}
		}

		// A full resync finds nothing to do: the listing parses back into
		// exactly the mirror.
		f.clock = f.clock.Add(f.b.cfg.FullSyncPeriod)
		f.sync(backend.Changes{Resync: true})
		if n := ops(f.b); n != 0 || !f.b.LastSyncFull() {
			t.Fatalf("a full resync right after a sync: full %v, %d operations: %+v", f.b.LastSyncFull(), n, f.b.Last)
		}
		// A periodic sync counts the fixed chains' rules through netlink,
		// finds them as written, and reads nothing back.
		f.sync(backend.Changes{Resync: true})
		if n := ops(f.b); n != 0 || f.b.LastSyncFull() {
			t.Fatalf("a periodic sync of an intact table: full %v, %d operations: %+v", f.b.LastSyncFull(), n, f.b.Last)
		}

		// A restart (a new backend, Reset) reconciles without writing.
		restarted := realFixture(t)
		restarted.state = f.state
		restarted.sync(backend.Changes{})
		if n := ops(restarted.b); n != 0 {
			t.Fatalf("a restart on an up-to-date table wrote %d operations: %+v", n, restarted.b.Last)
		}
		f = restarted

		// One endpoint changes: a small transaction the kernel accepts.
		web := richServices()[0]
		web.Endpoints = web.Endpoints[:1]
		f.set(web)
		if n := ops(f.b); n == 0 || n > 6 {
			t.Fatalf("one endpoint change wrote %d operations: %+v", n, f.b.Last)
		}

		// A deleted service's chains are emptied, then deleted a while later.
		sticky := backend.KeyOf(richServices()[3])
		f.del(sticky)
		if !strings.Contains(nftIn(t, ns, "list", "chains"), "ns/sticky/") {
			t.Fatal("the deleted service's chains went at once; they must wait for the map elements to be released")
		}
		f.clock = f.clock.Add(2 * staleDelay)
		f.sync(backend.Changes{})
		if l := nftIn(t, ns, "list", "ruleset"); strings.Contains(l, "ns/sticky/") {
			t.Fatalf("stale chains still there after %v:\n%s", 2*staleDelay, l)
		}

		// Behind our back: a flushed chain, a deleted element, a foreign rule.
		nftIn(t, ns, "flush", "chain", "ip", "kpng", "services")
		nftIn(t, ns, "delete", "element", "ip", "kpng", "cluster-ips", "{ 10.96.0.5 }")
		nftIn(t, ns, "add", "rule", "ip", "kpng", "masquerading", "counter")
		f.sync(backend.Changes{Resync: true})
		if n := ops(f.b); n == 0 {
			t.Fatal("the resync did not repair the table")
		}
		f.sync(backend.Changes{Resync: true})
		if n := ops(f.b); n != 0 {
			t.Fatalf("the table was not fully repaired: a second resync wrote %d operations", n)
		}

		// "nft flush table": every chain emptied, the table still there. The
		// periodic check sees it in IPv4 only.
		nftIn(t, ns, "flush", "table", "ip", "kpng")
		f.sync(backend.Changes{Resync: true})
		if !f.b.LastSyncFull() || f.b.Last[0].Operations == 0 || f.b.Last[1].Full {
			t.Fatalf("the periodic check missed a flushed table: %+v", f.b.Last)
		}
		f.sync(backend.Changes{Resync: true})
		if n := ops(f.b); n != 0 || f.b.LastSyncFull() {
			t.Fatalf("after repairing a flushed table: full %v, %d operations: %+v", f.b.LastSyncFull(), n, f.b.Last)
		}

		// The whole table deleted by hand: rebuilt.
		nftIn(t, ns, "delete", "table", "ip", "kpng")
		f.sync(backend.Changes{Resync: true})
		if !strings.Contains(nftIn(t, ns, "list", "tables"), "table ip kpng") {
			t.Fatal("the deleted table was not rebuilt")
		}
		f.sync(backend.Changes{Resync: true})
		if n := ops(f.b); n != 0 {
			t.Fatalf("after the rebuild a resync wrote %d operations", n)
		}

		// --cleanup removes both tables.
		p := &Plugin{Config: testConfig(), set: true}
		if err := p.Cleanup(ctx); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
		if l := nftIn(t, ns, "list", "tables"); strings.Contains(l, "kpng") {
			t.Fatalf("tables left after cleanup:\n%s", l)
		}
		_ = time.Second
	})
}

// TestNftCommandReportsErrors: a transaction nft refuses is an error that
// says why, and changes nothing.
func TestNftCommandReportsErrors(t *testing.T) {
	inNetns(t, func(ns *netnstest.Netns) {
		real, err := knftables.New(knftables.IPv4Family, "kpng")
		if err != nil {
			t.Fatal(err)
		}
		n := nftCommand{real}
		tx := n.NewTransaction()
		tx.Add(&knftables.Table{})
		tx.Add(&knftables.Chain{Name: "c"})
		tx.Delete(&knftables.Chain{Name: "missing"})
		err = n.Run(context.Background(), tx)
		if err == nil || !strings.Contains(err.Error(), "nft -f") || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("Run: %v; want nft's error naming the missing chain", err)
		}
		if out := nftIn(t, ns, "list", "tables"); strings.Contains(out, "kpng") {
			t.Errorf("a refused transaction left: %s", out)
		}
	})
}

// TestNftCommandWritesNothingOfAFailedRendering: when rendering nft's input
// fails after some of it was written (an operation knftables refuses, past
// the first chunks), nft commits nothing: the transaction is atomic even
// though it is written as it is rendered.
func TestNftCommandWritesNothingOfAFailedRendering(t *testing.T) {
	inNetns(t, func(ns *netnstest.Netns) {
		real, err := knftables.New(knftables.IPv4Family, "kpng")
		if err != nil {
			t.Fatal(err)
		}
		n := nftCommand{real}
		ctx := context.Background()
		if err := n.runOps(ctx, []op{{verb: opAdd, obj: &knftables.Table{}}, {verb: opAdd, obj: &knftables.Chain{Name: "before"}}}); err != nil {
			t.Fatal(err)
		}
		ops := []op{{verb: opAdd, obj: &knftables.Table{}}}
		for i := range 4 * renderChunk {
			ops = append(ops, op{verb: opAdd, obj: &knftables.Chain{Name: fmt.Sprintf("c%d", i)}})
		}
		ops = append(ops, op{verb: opAdd, obj: &knftables.Element{Set: "s"}}) // no key
		if err := n.runOps(ctx, ops); err == nil || !strings.Contains(err.Error(), "no key") {
			t.Fatalf("runOps: %v; want knftables' complaint of the element without a key", err)
		}
		if out := nftIn(t, ns, "list", "table", "ip", "kpng"); strings.Contains(out, "chain c0") || !strings.Contains(out, "chain before") {
			t.Errorf("a transaction whose rendering failed changed the table:\n%s", out)
		}
	})
}
