//go:build e2e

package ebpf

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
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
