//go:build e2e

package faults

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// ebpfSyncPeriod is to-ebpf's --sync-period in the suite (30 s by
// default). The kernel notifies no change of a BPF map or link, so the
// periodic sync, which reads the maps back and checks the links, is what
// repairs them: its period bounds the repair, and a short one keeps the
// damage faults short.
const ebpfSyncPeriod = 5 * time.Second

// ebpfRepairSlack is how long after the sync period a repair may come: the
// repairing sync's own time (milliseconds) and a loaded machine's delays.
const ebpfRepairSlack = time.Second

// ebpfDamages runs to-ebpf's equivalents of the rules damaged by hand: its
// dataplane is BPF maps, which the programs read, and bpf_links, pinned
// under the node's BPF filesystem, which attach the programs.
func (s *suite) ebpfDamages(t *testing.T) {
	// As a table deleted: every frontend gone.
	s.faultCounted(t, "services map emptied", true, func(t *testing.T, r *row) { s.repairMap(t, r, false) })
	// As one rule deleted: the frontend of one probe's Service port.
	s.faultCounted(t, "one frontend deleted", true, func(t *testing.T, r *row) { s.repairMap(t, r, true) })
	// As one rule of a Service's endpoints deleted: a slot of its set.
	s.faultCounted(t, "one backend slot deleted", true, s.repairSlot)
	s.faultCounted(t, "pinned links removed", true, s.repairLinks)
}

// refusedMap is the kernel refusing to-ebpf's map writes (slotsFull),
// with the pass conditions of the kernel refusing a transaction.
func (s *suite) refusedMap(t *testing.T, r *row) {
	s.refusedBy(t, r, func(t *testing.T) refusal { return s.slotsFull(t, s.c.node("node-1")) })
}

// servicesMap opens node n's pinned services map (kpng_services).
func servicesMap(t *testing.T, n *netlab.Node) *ebpf.Map {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(n.PinPath(), "kpng_services"), nil)
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	return m
}

// frontendKeys returns the keys of the services map: its frontends.
func frontendKeys(t *testing.T, m *ebpf.Map) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys[string(k)] = true
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// frontendKey is the services map's key (struct svc_key of
// backends/ebpf/bpf/maps.h) of a frontend for the node's sockets: the
// address as IPv4-mapped IPv6 and the port, both in network order, the
// protocol and the scope (0: the node's sockets).
func frontendKey(addr [16]byte, port uint16, proto uint8) []byte {
	k := make([]byte, 0, 20)
	k = append(k, addr[:]...)
	k = binary.BigEndian.AppendUint16(k, port)
	return append(k, proto, 0)
}

// repairMap deletes node-1's frontends by hand, with the proxy running
// (every one, or with one only that of the web Service's ClusterIP for
// TCP, which the ClusterIP TCP probe dials), and measures how long the
// proxy takes to write them back, polling the map (the kernel has no event
// for the test to wait on either). The pass condition: repaired at the
// first periodic sync after the damage, within ebpfSyncPeriod plus
// ebpfRepairSlack. Probes to the deleted frontends fail meanwhile, and
// are counted: from a pod they time out (not rewritten, the connection
// leaves for the node's gateway, which drops it), from outside a node port
// is refused (the tc program passes the packet to the node's stack).
func (s *suite) repairMap(t *testing.T, r *row, one bool) {
	n1 := s.c.node("node-1")
	p := s.c.procs[n1]
	m := servicesMap(t, n1)
	defer m.Close()
	before := frontendKeys(t, m)
	if len(before) == 0 {
		t.Fatal("the services map is empty before the damage")
	}
	victims := before
	if one {
		vip := netlab.ClusterIP(s.c.svcs["web"], 4, 80)
		k := frontendKey(vip.Addr().As16(), vip.Port(), 6)
		if !before[string(k)] {
			t.Fatalf("no frontend %v/tcp in the services map (%d frontends): the key's layout changed?", vip, len(before))
		}
		victims = map[string]bool{string(k): true}
	}
	mark := p.Mark()
	start := time.Now()
	for k := range victims {
		if err := m.Delete([]byte(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("deleting a frontend: %v", err)
		}
	}
	damaged := time.Now()
	back := func() (bool, int) {
		now := frontendKeys(t, m)
		missing := 0
		for k := range before {
			if !now[k] {
				missing++
			}
		}
		return missing == 0, missing
	}
	_, missing := back()
	seenDamage := missing > 0
	limit := ebpfSyncPeriod + 10*time.Second
	for {
		ok, _ := back()
		if ok {
			break
		}
		if time.Since(start) > limit {
			s.notRepaired(t, r, limit, "")
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the map
	}
	polled := time.Since(start)
	took := s.repairLogged(p, mark, damaged, polled, start)
	r.measured = fmt.Sprintf("%d of %d frontends deleted, repaired in %v", len(victims), len(before), took.Round(time.Millisecond))
	if !seenDamage {
		r.measured = fmt.Sprintf("%d of %d frontends deleted, repaired before the first check, within %v", len(victims), len(before), took.Round(time.Millisecond))
	}
	if polled-took > 100*time.Millisecond {
		r.measured += fmt.Sprintf(" (the proxy's log; the map polled at %v)", polled.Round(time.Millisecond))
	}
	if bound := ebpfSyncPeriod + ebpfRepairSlack; took > bound {
		r.problems = append(r.problems, fmt.Sprintf("repair took %v (> %v: the sync period, %v, plus %v)", took.Round(time.Millisecond), bound, ebpfSyncPeriod, ebpfRepairSlack))
	}
}

// repairLogged returns when the repair was done, from start: the end of
// the first periodic sync (a resync) that kpng logged after the damage,
// if it came before the polling saw the repair and within half a sync
// period of it (the resync before is a period earlier); else when the
// polling saw it, which is late by up to one poll.
func (s *suite) repairLogged(p *netlab.Process, mark int, damaged time.Time, polled time.Duration, start time.Time) time.Duration {
	out := p.Output()
	at, ok := syncLoggedAfter(out[min(mark, len(out)):], damaged, "resync=true")
	if seen := start.Add(polled); ok && at.Before(seen) && seen.Sub(at) < ebpfSyncPeriod/2 {
		return at.Sub(start)
	}
	return polled
}

// notRepaired records a damage not repaired within limit, and restarts
// node-1's proxy, whose new run repairs everything, for the next faults.
func (s *suite) notRepaired(t *testing.T, r *row, limit time.Duration, why string) {
	p := s.c.procs[s.c.node("node-1")]
	mark := p.Mark()
	start := time.Now()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	p.WaitOutputSince(t, mark, s.c.v.syncedLine(), firstSync)
	r.measured = fmt.Sprintf("not repaired within %v%s; a restart of the proxy repaired it, synced %v after", limit, why, time.Since(start).Round(time.Millisecond))
	r.problems = append(r.problems, fmt.Sprintf("not repaired within %v", limit))
}

// repairLinks removes, by hand, the pins of two of node-1's bpf_links:
// the connect4 program's on the node's cgroup (east-west: the ClusterIP
// probes) and the ingress tcx program's on the node's uplink (north-south:
// the probes from outside). kpng holds no handle to a link once it pinned
// it, so the pin is the link's last reference, and removing it detaches
// the program, as an admin's rm in /sys/fs/bpf would. The pass condition
// is the maps': repaired by the running proxy at the first periodic sync
// after the damage, within ebpfSyncPeriod plus ebpfRepairSlack, seen as
// traffic (a pod to the ClusterIP, outside to the NodePort) answered again
// and both links pinned again.
func (s *suite) repairLinks(t *testing.T, r *row) {
	c := s.c
	n1, podA, ext := c.node("node-1"), c.lab.Pod("pod-a"), c.lab.External
	p := c.procs[n1]
	pins := []string{"link_connect4", "link_tcx_in_" + netlab.NodeInterface}
	for _, pin := range pins {
		if _, err := os.Stat(filepath.Join(n1.PinPath(), pin)); err != nil {
			t.Fatalf("the link to remove: %v", err)
		}
	}
	vip := netlab.ClusterIP(c.svcs["web"], 4, 80)
	np := netip.AddrPortFrom(n1.IPv4, npCluster)
	eastWest := func() bool { return podA.Dial(netlab.TCP, vip, 200*time.Millisecond).Outcome == netlab.OK }
	northSouth := func() bool { return ext.Dial(netlab.TCP, np, 200*time.Millisecond).Outcome == netlab.OK }
	mark := p.Mark()
	start := time.Now()
	for _, pin := range pins {
		if err := os.Remove(filepath.Join(n1.PinPath(), pin)); err != nil {
			t.Fatalf("removing the pin %s: %v", pin, err)
		}
	}
	damaged := time.Now()
	// The kernel detaches a link whose last reference went a little later
	// (after an RCU grace period, from a work item): the damage is when
	// each side's traffic stops answering. A repair that came first would
	// hide it: the polls give up on it after the repair's bound.
	limit := ebpfSyncPeriod + 10*time.Second
	brokeEW, brokeNS := false, false
	for !brokeEW || !brokeNS {
		if time.Since(start) > ebpfSyncPeriod+ebpfRepairSlack {
			break
		}
		brokeEW = brokeEW || !eastWest()
		brokeNS = brokeNS || !northSouth()
		if !brokeEW || !brokeNS {
			time.Sleep(20 * time.Millisecond) // polling the dataplane, which has no event to wait on
		}
	}
	seenDamage := brokeEW && brokeNS
	// Repaired: traffic answered and both links pinned again (a link is
	// attached before it can be pinned: traffic may answer first).
	for !eastWest() || !northSouth() || !allPinned(n1, pins) {
		if time.Since(start) > limit {
			s.notRepaired(t, r, limit, " (links "+pinsPresent(n1, pins)+")")
			netlab.Eventually(t, 10*time.Second, func() netlab.Result { return podA.Dial(netlab.TCP, vip, answerTimeout) }, netlab.Answered())
			netlab.Eventually(t, 10*time.Second, func() netlab.Result { return ext.Dial(netlab.TCP, np, answerTimeout) }, netlab.Answered())
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the dataplane, which has no event to wait on
	}
	polled := time.Since(start)
	took := s.repairLogged(p, mark, damaged, polled, start)
	r.measured = fmt.Sprintf("connect4's and %s's ingress links unpinned, repaired in %v (links %s)", netlab.NodeInterface, took.Round(time.Millisecond), pinsPresent(n1, pins))
	if !seenDamage {
		r.measured = fmt.Sprintf("connect4's and %s's ingress links unpinned, traffic answered again within %v, its breakage not seen (east-west %v, north-south %v; links %s)", netlab.NodeInterface, took.Round(time.Millisecond), brokeEW, brokeNS, pinsPresent(n1, pins))
	}
	if bound := ebpfSyncPeriod + ebpfRepairSlack; took > bound {
		r.problems = append(r.problems, fmt.Sprintf("repair took %v (> %v: the sync period, %v, plus %v)", took.Round(time.Millisecond), bound, ebpfSyncPeriod, ebpfRepairSlack))
	}
}

// repairSlot deletes by hand, with the proxy running, slot 0 of the set
// that the web Service's ClusterIP TCP frontend (the ClusterIP TCP probe's)
// names in node-1's slots map (kpng_slots), and measures how long the proxy
// takes to make the frontend's set whole again (the same set written back,
// or a new one the frontend was switched to), polling the maps. Connections
// that pick the missing slot fail meanwhile (counted). The pass condition
// is the services map's: repaired by the running proxy at the first
// periodic sync after the damage, within ebpfSyncPeriod plus
// ebpfRepairSlack.
func (s *suite) repairSlot(t *testing.T, r *row) {
	n1 := s.c.node("node-1")
	p := s.c.procs[n1]
	svcs := servicesMap(t, n1)
	defer svcs.Close()
	slots, err := ebpf.LoadPinnedMap(filepath.Join(n1.PinPath(), "kpng_slots"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slots.Close()
	vip := netlab.ClusterIP(s.c.svcs["web"], 4, 80)
	key := frontendKey(vip.Addr().As16(), vip.Port(), 6)
	// set is the frontend's set and count of slots (struct svc_val's
	// first two fields).
	set := func() (uint32, uint32) {
		v := make([]byte, svcs.ValueSize())
		if err := svcs.Lookup(key, v); err != nil {
			return 0, 0 // deleted meanwhile: not whole
		}
		return binary.NativeEndian.Uint32(v[0:4]), binary.NativeEndian.Uint32(v[4:8])
	}
	whole := func() bool {
		id, count := set()
		if count == 0 {
			return false
		}
		var ep slotEndpoint
		for i := range count {
			if err := slots.Lookup(slotKey{Set: id, Slot: i}, &ep); err != nil {
				return false
			}
		}
		return true
	}
	id, count := set()
	if count < 2 || !whole() {
		t.Fatalf("the web Service's frontend %v/tcp: set %d of %d slots, whole %v; want a whole set of 2", vip, id, count, whole())
	}
	mark := p.Mark()
	start := time.Now()
	if err := slots.Delete(slotKey{Set: id, Slot: 0}); err != nil {
		t.Fatalf("deleting slot 0 of set %d: %v", id, err)
	}
	damaged := time.Now()
	seenDamage := !whole()
	limit := ebpfSyncPeriod + 10*time.Second
	for !whole() {
		if time.Since(start) > limit {
			s.notRepaired(t, r, limit, "")
			podA := s.c.lab.Pod("pod-a")
			netlab.Eventually(t, 10*time.Second, func() netlab.Result { return podA.Dial(netlab.TCP, vip, answerTimeout) }, netlab.Answered())
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the maps
	}
	polled := time.Since(start)
	took := s.repairLogged(p, mark, damaged, polled, start)
	r.measured = fmt.Sprintf("slot 0 of %d deleted, repaired in %v", count, took.Round(time.Millisecond))
	if !seenDamage {
		r.measured = fmt.Sprintf("slot 0 of %d deleted, repaired before the first check, within %v", count, took.Round(time.Millisecond))
	}
	if bound := ebpfSyncPeriod + ebpfRepairSlack; took > bound {
		r.problems = append(r.problems, fmt.Sprintf("repair took %v (> %v: the sync period, %v, plus %v)", took.Round(time.Millisecond), bound, ebpfSyncPeriod, ebpfRepairSlack))
	}
}

// allPinned reports whether every one of pins is in node n's pin folder.
func allPinned(n *netlab.Node, pins []string) bool {
	for _, pin := range pins {
		if _, err := os.Stat(filepath.Join(n.PinPath(), pin)); err != nil {
			return false
		}
	}
	return true
}

// pinsPresent says which of pins are in node n's pin folder.
func pinsPresent(n *netlab.Node, pins []string) string {
	present := 0
	for _, pin := range pins {
		if _, err := os.Stat(filepath.Join(n.PinPath(), pin)); err == nil {
			present++
		}
	}
	return fmt.Sprintf("pinned again: %d of %d", present, len(pins))
}

// slotKey is the slots map's key (struct slot_key of
// backends/ebpf/bpf/maps.h): a backend set and a slot in it.
type slotKey struct{ Set, Slot uint32 }

// slotEndpoint is the slots map's value (struct endpoint).
type slotEndpoint struct {
	Addr      [4]uint32
	Port, Pad uint16
}

// fillerSet is the first set id of the filler: kpng takes its ids from
// the bottom of the id space.
const fillerSet = 0xf000_0000

// slotsFull is to-ebpf's equivalent of the kernel refusing a transaction:
// node-1's slots map (kpng_slots, where each Service's backends are
// written, under a new set id at each change) is filled up to its
// max_entries with slots of sets no frontend names, so that the kernel
// refuses every write that adds a slot (E2BIG), as when a cluster
// outgrows the map. What kpng wrote before stays in place (the frontends
// and their sets): traffic flows. The refusal ends when the filler is
// deleted; the repair is kpng's first sync to succeed after that, with
// every frontend of before in place.
func (s *suite) slotsFull(t *testing.T, n1 *netlab.Node) refusal {
	p := s.c.procs[n1]
	m, err := ebpf.LoadPinnedMap(filepath.Join(n1.PinPath(), "kpng_slots"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.KeySize() != 8 || m.ValueSize() != 20 {
		m.Close()
		t.Fatalf("kpng_slots: keys of %d bytes and values of %d, the test writes struct slot_key's 8 and struct endpoint's 20", m.KeySize(), m.ValueSize())
	}
	svcs := servicesMap(t, n1)
	before := frontendKeys(t, svcs)
	const batch = 8192
	var filler []slotKey
	vals := make([]slotEndpoint, batch) // no endpoint: no frontend names these sets
	for i := 0; ; i += batch {
		keys := make([]slotKey, batch)
		for j := range keys {
			keys[j] = slotKey{Set: fillerSet + uint32((i+j)>>16), Slot: uint32((i + j) & 0xffff)}
		}
		n, err := m.BatchUpdate(keys, vals, nil)
		filler = append(filler, keys[:n]...)
		if errors.Is(err, syscall.E2BIG) {
			break
		}
		if err != nil {
			m.Close()
			svcs.Close()
			t.Fatalf("filling kpng_slots: %d slots written, then: %v", len(filler), err)
		}
		if i > int(m.MaxEntries()) {
			m.Close()
			svcs.Close()
			t.Fatalf("kpng_slots took %d slots, above its max_entries %d, and refused none", len(filler), m.MaxEntries())
		}
	}
	t.Logf("kpng_slots filled with %d slots (max_entries %d)", len(filler), m.MaxEntries())
	var mark int
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		mark = p.Mark()
		for i := 0; i < len(filler); i += batch {
			keys := filler[i:min(i+batch, len(filler))]
			if _, err := m.BatchDelete(keys, nil); err != nil {
				// A batch stops at its first error: the rest one by one.
				for _, k := range keys {
					if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
						t.Errorf("deleting the filler of kpng_slots: %v", err)
					}
				}
			}
		}
	}
	t.Cleanup(func() {
		release()
		m.Close()
		svcs.Close()
	})
	return refusal{
		release: release,
		repaired: func() bool {
			out := p.Output()
			if !strings.Contains(out[min(mark, len(out)):], "Dataplane synced again") {
				return false
			}
			now := frontendKeys(t, svcs)
			for k := range before {
				if !now[k] {
					return false
				}
			}
			return true
		},
		errno: `argument list too long|E2BIG`,
	}
}
