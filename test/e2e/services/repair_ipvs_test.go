//go:build e2e

package services

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// TestRepair for to-ipvs: its dataplane is IPVS's virtual and real
// servers, kube-ipvs0's addresses, ipsets and a fixed handful of iptables
// rules. IPVS and ipset send no notification of a change; the backend
// watches kube-ipvs0's deletion, and its periodic sync (--sync-period, 2 s
// in the test) checks the rest cheaply and repairs what differs
// (docs/ipvs.md). "Repaired" is every line of ipvsDataplane back, not a
// count.

// isIPVS reports whether backend name is kpng's to-ipvs.
func isIPVS(name string) bool { return strings.TrimPrefix(name, "kube-") == "ipvs" }

// ipvsDamages are TestRepair's damages for to-ipvs: wipe (the firewall
// rules of every family flushed, their chains deleted) with IPVS cleared
// and the ipsets flushed too; kube-ipvs0 deleted (its addresses go with
// it); the nat table flushed; one chain flushed; one jump deleted; the
// ipsets flushed alone.
func ipvsDamages(wipe damage) []damage {
	wipe.argv = append(slices.Clone(wipe.argv), []string{"ipvsadm", "-C"}, []string{"ipset", "flush"})
	return []damage{
		wipe,
		{name: "kube-ipvs0-deleted", argv: [][]string{{"ip", "link", "del", "kube-ipvs0"}}},
		{name: "nat-table-flushed", argv: [][]string{{"iptables", "-w", "5", "-t", "nat", "-F"}, {"ip6tables", "-w", "5", "-t", "nat", "-F"}}},
		{name: "chain-flushed", argv: [][]string{{"iptables", "-w", "5", "-t", "nat", "-F", "KPNG-IPVS-SERVICES"}}},
		{name: "jump-deleted", argv: [][]string{{"ip6tables", "-w", "5", "-t", "nat", "-D", "PREROUTING", "-j", "KPNG-IPVS-SERVICES"}}},
		{name: "ipsets-flushed", argv: [][]string{{"ipset", "flush"}}},
	}
}

// ipvsDataplane is what to-ipvs holds in node n, one line each, sorted:
// the rules of iptables-save and ip6tables-save, IPVS's virtual and real
// servers (ipvsadm --save), kube-ipvs0's addresses, and the ipsets'
// members.
func ipvsDataplane(t *testing.T, n *netlab.Node) []string {
	t.Helper()
	run := func(argv ...string) string {
		t.Helper()
		out, err := n.Run(argv...)
		if err != nil {
			t.Fatalf("node %s: %s: %v\n%s", n.Name, strings.Join(argv, " "), err, out)
		}
		return out
	}
	var lines []string
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		for _, l := range strings.Split(run(cmd), "\n") {
			if strings.HasPrefix(l, "-A ") {
				lines = append(lines, cmd+": "+l)
			}
		}
	}
	for _, l := range strings.Split(run("ipvsadm", "--save", "-n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, "ipvsadm: "+l)
		}
	}
	// "7: kube-ipvs0    inet 10.96.0.10/32 scope global kube-ipvs0 ...":
	// the address only (kube-ipvs0 comes back with another index).
	for _, l := range strings.Split(run("ip", "-o", "addr", "show"), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[1] == "kube-ipvs0" {
			lines = append(lines, "kube-ipvs0: "+f[3])
		}
	}
	// Members only: a set's "create" line holds a random initval, new
	// when the set is refilled aside and swapped in.
	for _, l := range strings.Split(run("ipset", "save"), "\n") {
		if strings.HasPrefix(l, "add ") {
			lines = append(lines, "ipset: "+l)
		}
	}
	slices.Sort(lines)
	return lines
}

// sameLines reports whether two sorted lists hold the same lines.
func sameLines(a, b []string) bool { return slices.Equal(a, b) }

// lineDiff lists, for a failure, the lines of before that after lacks
// and those after has beyond before, the first few of each.
func lineDiff(before, after []string) string {
	before, after = slices.Sorted(slices.Values(before)), slices.Sorted(slices.Values(after))
	var missing, extra []string
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i] < after[j]):
			missing = append(missing, before[i])
			i++
		case i == len(before) || after[j] < before[i]:
			extra = append(extra, after[j])
			j++
		default:
			i, j = i+1, j+1
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	const most = 10
	show := func(what string, l []string) string {
		if len(l) == 0 {
			return ""
		}
		s := fmt.Sprintf("\n%d %s:\n%s", len(l), what, join(l[:min(len(l), most)]))
		if len(l) > most {
			s += "  ...\n"
		}
		return s
	}
	return show("missing", missing) + show("not there before", extra)
}

// awaitIPVSRepair waits for a sync of the proxy (its log line after mark)
// after which node n's dataplane is before again, and returns the proxy's
// running time from start (when it was resumed) to the end of that sync.
// After each sync the proxy is paused while the test looks, which takes
// seconds in the emulated VM: so the look sees what that sync left, not a
// repair that a later sync finished meanwhile, and competes with no
// sync; the pauses are not counted. It fails when the proxy ran for
// within without a repair.
func awaitIPVSRepair(t *testing.T, n *netlab.Node, proc *netlab.Process, mark int, start time.Time, before []string, within time.Duration) time.Duration {
	t.Helper()
	var paused time.Duration
	for {
		next, ok := nextSyncEnd(proc, mark, within-(time.Since(start)-paused))
		if !ok {
			after := ipvsDataplane(t, n)
			t.Fatalf("no sync of the proxy repaired it within %v of its running time: %d lines before the damage, %d now%s\nthe proxy's output since the damage:\n%s",
				within, len(before), len(after), lineDiff(before, after), proc.Output()[mark:])
		}
		ran := time.Since(start) - paused
		stop := time.Now()
		var after []string
		whilePaused(t, proc, func() { after = ipvsDataplane(t, n) })
		paused += time.Since(stop)
		if sameLines(before, after) {
			return ran
		}
		mark = next
	}
}

// whilePaused runs f with proc stopped (SIGSTOP), resuming it after, even
// when f fails the test.
func whilePaused(t *testing.T, proc *netlab.Process, f func()) {
	t.Helper()
	if err := syscall.Kill(proc.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(proc.Pid(), syscall.SIGCONT)
	f()
}

// nextSyncEnd waits up to within for the proxy's next line after mark that
// ends a sync ("Dataplane synced", logged at -v=2 after each one, or "Sync
// failed"), and returns the mark after that line.
func nextSyncEnd(proc *netlab.Process, mark int, within time.Duration) (int, bool) {
	next := mark
	ok := proc.AwaitOutput(mark, func(out string) bool {
		for off := 0; ; {
			i := strings.IndexByte(out[off:], '\n')
			if i < 0 {
				return false
			}
			if line := out[off : off+i]; strings.Contains(line, "Dataplane synced") || strings.Contains(line, "Sync failed") {
				next = mark + off + i + 1
				return true
			}
			off += i + 1
		}
	}, within)
	return next, ok
}

// logRepair logs the proxy's lines about a repair in out (its output since
// the damage): what it found changed, and the syncs that followed, with
// their times.
func logRepair(t *testing.T, out string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "behind kpng's back") || strings.Contains(l, "kube-ipvs0 was deleted") ||
			strings.Contains(l, "Resync requested") || (len(lines) > 0 && strings.Contains(l, "Dataplane synced")) {
			lines = append(lines, l)
		}
	}
	t.Logf("the proxy's log of the repair:\n%s", join(lines))
}
