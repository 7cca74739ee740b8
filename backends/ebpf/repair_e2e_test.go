//go:build e2e

package ebpf

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// resync runs the periodic sync, as the driver does every --sync-period.
func resync(t *testing.T, b backend.Backend, st *backend.State) {
	t.Helper()
	if err := b.Sync(context.Background(), st, backend.Changes{Resync: true}); err != nil {
		t.Fatal(err)
	}
}

// waitFor dials until the outcome is want: the kernel releases a link
// whose last reference went a little later (from a work item), and says
// so by no event but the traffic.
func (c *client) waitFor(t *testing.T, kind, addr, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for got := c.dial(t, kind, addr); got != want; got = c.dial(t, kind, addr) {
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: still %q after 10 s, want %q", kind, addr, got, want)
		}
	}
}

func pinnedLinkID(t *testing.T, pin string) link.ID {
	t.Helper()
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// TestPeriodicSyncRepairsLinks damages the socket programs' links by hand,
// with the backend running, in each way an admin or another tool could:
// a pin removed (the link's last reference: it detaches), a link
// detached, a pin removed while someone else holds the link (it stays
// attached), another program put in the link's place. Each time, the
// Service stops being translated, and the periodic sync puts it right.
func TestPeriodicSyncRepairsLinks(t *testing.T) {
	s := newSocketLab(t)
	vip := clusterIP + ":80"
	ok := "ok " + ep1 + ":8080 peer=" + vip
	s.set(webService(ep1))
	s.client.want(t, "tcp", vip, ok)
	pin := filepath.Join(s.pins, "link_connect4")
	objs := s.plugin.objs
	checkLinks := func(want string) {
		t.Helper()
		start := time.Now()
		repaired, err := objs.CheckLinks()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("links checked in %v, repaired: %q", time.Since(start).Round(time.Microsecond), repaired)
		if len(repaired) != 1 || !strings.HasPrefix(repaired[0], "connect4: ") || !strings.Contains(repaired[0], want) {
			t.Errorf("repaired %q, want connect4's link only, %q", repaired, want)
		}
	}
	if repaired, err := objs.CheckLinks(); err != nil || len(repaired) > 0 {
		t.Fatalf("links checked before any damage: repaired %q, %v", repaired, err)
	}

	// The pin removed: the periodic sync (through the backend, as the
	// driver calls it) attaches and pins a new link.
	if err := os.Remove(pin); err != nil {
		t.Fatal(err)
	}
	s.client.waitFor(t, "tcp", vip, "err ENETUNREACH")
	resync(t, s.b, s.st)
	s.client.want(t, "tcp", vip, ok)
	id := pinnedLinkID(t, pin)

	// Detached by hand (bpftool link detach): the pin stays, on a link
	// attached nowhere.
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	s.client.want(t, "tcp", vip, "err ENETUNREACH")
	checkLinks("attached again")
	s.client.want(t, "tcp", vip, ok)
	if pinnedLinkID(t, pin) == id {
		t.Error("the detached link is still pinned")
	}

	// The pin removed while another process holds the link: it stays
	// attached, and is pinned again rather than doubled by a new one.
	id = pinnedLinkID(t, pin)
	held, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pin); err != nil {
		held.Close()
		t.Fatal(err)
	}
	checkLinks("pinned again")
	held.Close()
	if got := pinnedLinkID(t, pin); got != id {
		t.Errorf("pinned link %d, want the held link %d", got, id)
	}
	s.client.want(t, "tcp", vip, ok)

	// Another program in the link's place (another kpng's, whose maps
	// know no Service): updated back to this run's.
	other, err := Load("")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer other.Close()
	l, err = link.LoadPinnedLink(pin, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Update(other.objs.KpngConnect4)
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	s.client.want(t, "tcp", vip, "err ENETUNREACH")
	checkLinks("updated")
	s.client.want(t, "tcp", vip, ok)
}

// TestPeriodicSyncRepairsTCLinks removes the pin of the node-port
// program's ingress link (which detaches it) with the backend running in
// the node's namespace, and runs the periodic sync from a thread of the
// test's own namespace, as the driver may: the link is attached again to
// the node's eth0, in the node's namespace, never to an interface of the
// machine's.
func TestPeriodicSyncRepairsTCLinks(t *testing.T) {
	l := newNSLab(t)
	l.set(t, lbService(localv1.TrafficPolicy_CLUSTER, nsPod+"+local"))
	l.want(t, nsNode, nsPod, nsNodeToPod)
	pin := filepath.Join(l.pins, "link_tcx_in_eth0")
	var eth0 int
	if err := l.node.Do(func() error {
		ifc, err := net.InterfaceByName("eth0")
		if err == nil {
			eth0 = ifc.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pin); err != nil {
		t.Fatal(err)
	}
	// Without the ingress program, the node's stack gets the node port's
	// SYN and refuses it.
	np := net.JoinHostPort(nsNode, "30080")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := l.tcp(np, time.Second)
		if err != nil && errName(err) == "ECONNREFUSED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tcp %s with the ingress link's pin removed: %v after 10 s, want ECONNREFUSED", np, err)
		}
	}
	start := time.Now()
	resync(t, l.b, l.st)
	t.Logf("periodic sync that re-attached the ingress link: %v", time.Since(start).Round(time.Microsecond))
	ln, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := ln.Info()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	if tcx := info.TCX(); tcx == nil || int(tcx.Ifindex) != eth0 {
		t.Fatalf("the ingress link is attached to %+v, want the node's eth0 (index %d)", tcx, eth0)
	}
	l.want(t, nsNode, nsPod, nsNodeToPod)
	if links := tcLinks(t, l.pins); len(links) != 4 {
		t.Errorf("tc links pinned: %v, want eth0's and vp's two", links)
	}
}

// TestPeriodicSyncRepairsSlots deletes a slot of a Service's set by hand
// (its frontend still counts it: a connection that picks it fails) and
// changes another to a wrong endpoint; the periodic sync rewrites them in
// place.
func TestPeriodicSyncRepairsSlots(t *testing.T) {
	s := newSocketLab(t)
	vip := clusterIP + ":80"
	s.set(webService(ep1, ep2))
	km := s.b.(*Dataplane).m.(*kernelMaps)
	key := frontendKey(Frontend{Addr: netip.MustParseAddr(clusterIP), Port: 80, Proto: protoTCP})
	var v sockSvcVal
	if err := km.services.Lookup(&key, &v); err != nil {
		t.Fatal(err)
	}
	if v.Count != 2 {
		t.Fatalf("the frontend's count is %d, want 2", v.Count)
	}
	var before [2]sockEndpoint
	for i := range before {
		if err := km.slots.Lookup(sockSlotKey{Set: v.Set, Slot: uint32(i)}, &before[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := km.slots.Delete(sockSlotKey{Set: v.Set, Slot: 0}); err != nil {
		t.Fatal(err)
	}
	wrong := before[1]
	wrong.Port = portKey(9) // nothing listens there
	if err := km.slots.Put(sockSlotKey{Set: v.Set, Slot: 1}, wrong); err != nil {
		t.Fatal(err)
	}
	// Every connection fails now: slot 0 is missing, slot 1 leads
	// nowhere.
	if got := s.client.dial(t, "tcp", vip); strings.HasPrefix(got, "ok ") {
		t.Fatalf("tcp %s with its slots damaged: %q", vip, got)
	}
	start := time.Now()
	resync(t, s.b, s.st)
	t.Logf("periodic sync that repaired the set: %v", time.Since(start).Round(time.Microsecond))
	var after sockSvcVal
	if err := km.services.Lookup(&key, &after); err != nil {
		t.Fatal(err)
	}
	if after != v {
		t.Errorf("the frontend was switched (%+v, was %+v): an in-place repair keeps it", after, v)
	}
	for i := range before {
		var ep sockEndpoint
		if err := km.slots.Lookup(sockSlotKey{Set: v.Set, Slot: uint32(i)}, &ep); err != nil || ep != before[i] {
			t.Errorf("slot %d: %v, %v; want %v", i, ep, err, before[i])
		}
	}
	seen := map[string]bool{}
	for range 40 {
		seen[s.client.dial(t, "tcp", vip)] = true
	}
	if !seen["ok "+ep1+":8080 peer="+vip] || !seen["ok "+ep2+":8080 peer="+vip] || len(seen) != 2 {
		t.Errorf("40 connections after the repair: %v", seen)
	}
	if s.b.(*Dataplane).LastSyncFull() {
		t.Error("the repair of one set is reported as a full sync")
	}
}
