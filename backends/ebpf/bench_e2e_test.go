//go:build e2e

package ebpf

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"

	"github.com/kpng/kpng/api/localv1"
)

// TestConnectLatency measures what the socket programs add to a TCP
// connect: the mean connect (and close) time to a cluster IP against the
// same to the endpoint's own address, with 100 and 30,000 Services in the
// maps, and the maps' memory. It logs the figures (docs/ebpf.md) and fails
// only on a gross regression: CI shares its cores with the whole suite.
func TestConnectLatency(t *testing.T) {
	s := newSocketLab(t)
	// The kernel's run-time statistics of BPF programs, while this test
	// holds them on: what connect4 itself costs, without the noise of the
	// connections around it.
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	const perRound, rounds = 300, 15
	for _, services := range []int{100, 30000} {
		var ses []*localv1.ServiceEndpoints
		for i := range services {
			se := webService(ep1)
			se.Service.Name = fmt.Sprintf("svc-%d", i)
			se.Service.ClusterIp = fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
			se.Service.ExternalIps = nil
			se.Service.Ports = se.Service.Ports[:1]
			se.Endpoints = se.Endpoints[1:] // http only
			ses = append(ses, se)
		}
		start := time.Now()
		s.set(ses...)
		synced := time.Since(start)
		// The periodic check of a resync: the services map read back.
		start = time.Now()
		if err := s.b.Sync(context.Background(), s.st, backend.Changes{Resync: true}); err != nil {
			t.Fatal(err)
		}
		if s.b.(*Dataplane).LastSyncFull() {
			t.Error("the periodic check found the maps changed")
		}
		checked := time.Since(start)
		vip := ses[services/2].Service.ClusterIp + ":80"
		s.client.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip)

		// Alternate the two, so that both see the same machine load.
		var direct, viaService []int64
		var hookTime time.Duration
		var hookRuns uint64
		for range rounds {
			direct = append(direct, s.connects(t, perRound, ep1+":8080"))
			before := s.connect4Stats(t)
			viaService = append(viaService, s.connects(t, perRound, vip))
			after := s.connect4Stats(t)
			hookTime += after.Runtime - before.Runtime
			hookRuns += after.RunCount - before.RunCount
		}
		hook := time.Duration(0)
		if hookRuns > 0 {
			hook = hookTime / time.Duration(hookRuns)
		}
		slices.Sort(direct)
		slices.Sort(viaService)
		d, v := direct[rounds/2], viaService[rounds/2]
		mem := mapsMemory(t, s)
		t.Logf("%d Services (synced in %v, checked in %v): connect+close to the endpoint %v, to the cluster IP %v (%+.1f%%), median of %d rounds of %d; connect4 runs in %v on a Service address (kernel stats); maps' memory %s",
			services, synced.Round(time.Millisecond), checked.Round(time.Microsecond), time.Duration(d), time.Duration(v), 100*float64(v-d)/float64(d), rounds, perRound, hook, mem)
		if v > 3*d {
			t.Errorf("%d Services: a connect to the cluster IP takes %v, to the endpoint %v", services, time.Duration(v), time.Duration(d))
		}
	}
}

func (s *socketLab) connect4Stats(t *testing.T) *ebpf.ProgramStats {
	t.Helper()
	st, err := s.progs.KpngConnect4.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (s *socketLab) connects(t *testing.T, n int, addr string) int64 {
	t.Helper()
	out := s.client.dial(t, "connects", fmt.Sprintf("%d %s", n, addr))
	ns, err := strconv.ParseInt(strings.TrimPrefix(out, "ok "), 10, 64)
	if err != nil {
		t.Fatalf("connects %s: %s", addr, out)
	}
	return ns
}

// mapsMemory sums the memory the kernel charges for each map (memlock in
// its fdinfo), by map.
func mapsMemory(t *testing.T, s *socketLab) string {
	t.Helper()
	d := s.b.(*Dataplane)
	km := d.m.(*kernelMaps)
	var parts []string
	var total uint64
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{"services", km.services}, {"slots", km.slots}, {"members", km.members}, {"affinity", s.objs.KpngAffinity}, {"flows", s.objs.KpngFlows}, {"revnat", s.objs.KpngRevnat},
		// The north-south programs' own maps.
		{"ct", s.plugin.objs.np.KpngCt}, {"rct", s.plugin.objs.np.KpngRct}, {"client affinity", s.plugin.objs.np.KpngClientAffinity}} {
		info, err := m.m.Info()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := info.Memlock()
		total += b
		parts = append(parts, fmt.Sprintf("%s %.1f MiB", m.name, float64(b)/(1<<20)))
	}
	return fmt.Sprintf("%.1f MiB (%s)", float64(total)/(1<<20), strings.Join(parts, ", "))
}

// BenchmarkPeriodicCheck measures the check of a periodic sync that finds
// nothing to repair, against the kernel's maps: the services map read back
// (batch lookups) and compared with what was written, then the slots and
// membership entries read back and each set's entries counted. Services
// have a TCP and a UDP port on a cluster IP, 3 endpoints each: 2
// frontends, 2 sets and 6 slots per Service. "services" is the services
// map's part alone (what the check was before it read the sets).
func BenchmarkPeriodicCheck(b *testing.B) {
	netnstest.RequireRoot(b)
	for _, n := range []int{100, 10000} {
		o, err := Load("")
		if err != nil {
			b.Fatalf("%+v", err)
		}
		d := NewDataplane(o.Maps())
		st := backend.NewState("node-1")
		for i := range n {
			se := webService(fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), fmt.Sprintf("10.2.%d.%d", i/250, i%250+1), fmt.Sprintf("10.3.%d.%d", i/250, i%250+1))
			se.Service.Name = fmt.Sprintf("svc-%d", i)
			se.Service.ClusterIp = fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
			se.Service.ExternalIps = nil
			st.Services[backend.KeyOf(se)] = se
		}
		ctx := context.Background()
		if err := d.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
			o.Close()
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("services=%d/services", n), func(b *testing.B) {
			for b.Loop() {
				if same, err := d.check(); err != nil || !same {
					b.Fatalf("check: same %v, %v", same, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/Service")
		})
		b.Run(fmt.Sprintf("services=%d/services+sets", n), func(b *testing.B) {
			for b.Loop() {
				if err := d.Sync(ctx, st, backend.Changes{Resync: true}); err != nil {
					b.Fatal(err)
				}
				if d.LastSyncFull() {
					b.Fatal("the check found the maps changed")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/Service")
		})
		o.Close()
	}
}

// TestConnectCostRevnatFullVsCleaned measures what sock_release saves a
// connect, against the kernel's run-time statistics of the programs:
// with kpng_revnat full of closed sockets' entries, as it was before
// sock_release (its link detached and the map filled to capacity with
// entries of sockets that no longer exist: every connect through a
// Service evicts one), and with it cleaned (the link attached again by
// the periodic check, the map emptied: each connection's entry is deleted
// at its close). The two alternate, round by round, so that both see the
// machine's load, which the test logs. It also logs the mean connect and
// close as the client sees it, to the cluster IP and to the endpoint
// directly, and sock_release's own run time. It fails only if the
// release program leaves entries behind.
func TestConnectCostRevnatFullVsCleaned(t *testing.T) {
	s := newSocketLab(t)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	s.set(webService(ep1))
	vip, direct := clusterIP+":80", ep1+":8080"
	s.client.want(t, "tcp", vip, "ok "+ep1+":8080 peer="+vip)
	revnat := s.objs.KpngRevnat
	capacity := int(revnat.MaxEntries())
	// Entries of sockets that no longer exist: cookies no socket has
	// (the top bit set), towards an endpoint of the Service.
	stale := make([]sockRevKey, capacity)
	vals := make([]sockEndpoint, capacity)
	for i := range stale {
		stale[i] = sockRevKey{Cookie: 1<<63 | uint64(i), Ep: endpointKey(netip.MustParseAddrPort(direct))}
		vals[i] = endpointKey(netip.MustParseAddrPort(vip))
	}
	empty := func() {
		t.Helper()
		var keys []sockRevKey
		var k sockRevKey
		var v sockEndpoint
		it := revnat.Iterate()
		for it.Next(&k, &v) {
			keys = append(keys, k)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		if err := batchDelete(revnat, keys); err != nil {
			t.Fatal(err)
		}
	}
	pin := filepath.Join(s.pins, "link_sock_release")
	full := func() {
		t.Helper()
		l, err := link.LoadPinnedLink(pin, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = l.Detach()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := revnat.BatchUpdate(stale, vals, nil); err != nil {
			t.Fatal(err)
		}
	}
	cleaned := func() {
		t.Helper()
		repaired, err := s.plugin.objs.CheckLinks()
		if err != nil || len(repaired) != 1 {
			t.Fatalf("the periodic check of the links: repaired %q, %v; want sock_release's", repaired, err)
		}
		empty()
	}
	type progStats struct{ runtime, runs [3]uint64 } // connect4, getpeername4, sock_release
	snapshot := func() (st progStats) {
		t.Helper()
		for i, p := range []*ebpf.Program{s.progs.KpngConnect4, s.progs.KpngGetpeername4, s.progs.KpngSockRelease} {
			ps, err := p.Stats()
			if err != nil {
				t.Fatal(err)
			}
			st.runtime[i], st.runs[i] = uint64(ps.Runtime), ps.RunCount
		}
		return st
	}
	// phase sums, per state (full, cleaned) and target (endpoint, cluster
	// IP), the programs' statistics and the client's mean connect times.
	type phase struct {
		prog  [2]progStats
		conns [2][]int64
	}
	var phases [2]phase
	const perRound, rounds = 300, 12
	var loads []string
	cur := -1
	for r := range rounds {
		loads = append(loads, loadAverage(t))
		for j := range 2 {
			state := (r + j) % 2 // alternate which goes first
			switch {
			case state == cur: // as the previous round left it
			case state == 0:
				full()
			default:
				cleaned()
			}
			cur = state
			for target, addr := range []string{direct, vip} {
				before := snapshot()
				phases[state].conns[target] = append(phases[state].conns[target], s.connects(t, perRound, addr))
				after := snapshot()
				for i := range 3 {
					phases[state].prog[target].runtime[i] += after.runtime[i] - before.runtime[i]
					phases[state].prog[target].runs[i] += after.runs[i] - before.runs[i]
				}
			}
			if state == 1 {
				// Every connection was closed: no entry is left.
				if n := entries(t, revnat); n != 0 {
					t.Errorf("round %d: kpng_revnat holds %d entries after %d connections, all closed", r, n, 2*perRound)
				}
			}
		}
	}
	loads = append(loads, loadAverage(t))
	perRun := func(p progStats, i int) time.Duration {
		if p.runs[i] == 0 {
			return 0
		}
		return time.Duration(p.runtime[i] / p.runs[i])
	}
	median := func(v []int64) time.Duration {
		v = slices.Clone(v)
		slices.Sort(v)
		return time.Duration(v[len(v)/2])
	}
	for state, name := range []string{"kpng_revnat full, sock_release detached (before it)", "kpng_revnat cleaned by sock_release"} {
		p := phases[state]
		d, v := median(p.conns[0]), median(p.conns[1])
		t.Logf("%s: connect4 %v on the cluster IP, %v on the endpoint's address; getpeername4 %v (hit), %v (miss); sock_release %v per close of a socket to the cluster IP, %v to the endpoint; connect+close %v to the cluster IP, %v to the endpoint (%+.1f%%), medians of %d rounds of %d",
			name, perRun(p.prog[1], 0), perRun(p.prog[0], 0), perRun(p.prog[1], 1), perRun(p.prog[0], 1), perRun(p.prog[1], 2), perRun(p.prog[0], 2),
			v, d, 100*float64(v-d)/float64(d), rounds, perRound)
	}
	t.Logf("1-minute load average at each round: %s", strings.Join(loads, " "))
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg).
func loadAverage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))[0]
}
