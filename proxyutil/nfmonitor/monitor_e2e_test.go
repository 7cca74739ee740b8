//go:build e2e

package nfmonitor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// inNetns creates a network namespace for the test (removed at its end)
// and opens a Watcher in it.
func inNetns(t *testing.T) (*netnstest.Netns, *Watcher) {
	t.Helper()
	ns := netnstest.New(t, "nfmon")
	var w *Watcher
	err := ns.Do(func() (err error) {
		w, err = Open()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return ns, w
}

// TestForeignChangesAreReportedOwnAreNot: a transaction of another process
// that touches the watched table is reported with its events; one of a
// command this process registered with Started is not; nor is a change to
// another table.
func TestForeignChangesAreReportedOwnAreNot(t *testing.T) {
	ns, w := inNetns(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan []Event, 10)
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func(e Event) bool { return e.Table == "watched" }, func(evs []Event) { got <- evs })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	nft := func(own bool, script string) {
		t.Helper()
		cmd := ns.Command(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if own {
			Started(cmd.Process.Pid) // ip netns exec execs nft in place: same pid
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("nft -f: %v\n%s", err, script)
		}
	}
	expect := func(want ...string) {
		t.Helper()
		select {
		case evs := <-got:
			var s []string
			for _, e := range evs {
				s = append(s, e.Op+" "+e.Kind+" "+e.Chain+e.Set)
			}
			if strings.Join(s, ", ") != strings.Join(want, ", ") {
				t.Errorf("reported %q; want %q", s, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no report within 10s; want %q", want)
		}
	}

	// Our own writes: the table and its chain, set and rules.
	nft(true, "table ip watched {\n set s { type ipv4_addr; elements = { 10.0.0.1 }; }\n chain c { ip daddr @s counter; }\n chain d { }\n}\n")
	// Someone else's change to another table.
	nft(false, "table ip other {\n chain c { counter; }\n}\n")
	// Someone else deletes a rule of ours: reported, alone.
	nft(false, "flush chain ip watched c\n")
	expect("del rule c")
	// Someone else deletes an element and a chain in one transaction.
	nft(false, "delete element ip watched s { 10.0.0.1 }\ndelete chain ip watched d\n")
	expect("del element s", "del chain d")
	// Someone else deletes the whole table.
	nft(false, "delete table ip watched\n")
	select {
	case evs := <-got:
		var table bool
		for _, e := range evs {
			table = table || (e.Op == "del" && e.Kind == "table")
		}
		if !table {
			t.Errorf("deleting the table reported %v; want a table deletion among them", evs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("deleting the table was not reported within 10s")
	}
	select {
	case evs := <-got:
		t.Errorf("unexpected report %v", evs)
	default:
	}
}
