//go:build e2e

package nft

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/internal/procstat"
)

// BenchmarkKernel runs against real nftables in a namespace of its own, at
// 10,000 services of 10 endpoints: the cold sync (reported once), then a
// sync after one endpoint change (the loop), with the nft operations each
// sends and the process's RSS. "netlink" is the backend as it runs;
// "nft" writes the incremental transactions with the nft command too.
// "netlink-1000" and "netlink-30000" are the same at 1,000 and 30,000
// services (the latter takes a minute before its loop): what grows with
// the number of services is the kernel's, its search of the table's sets
// by name and its walk of every chain at each commit (docs/performance.md,
// "One endpoint change").
//
//	go test -tags e2e -run XXX -bench 'Kernel/netlink$' ./backends/nft/
func BenchmarkKernel(b *testing.B) {
	b.Run("netlink", func(b *testing.B) { benchmarkKernel(b, 10000, true) })
	b.Run("nft", func(b *testing.B) { benchmarkKernel(b, 10000, false) })
	b.Run("netlink-1000", func(b *testing.B) { benchmarkKernel(b, 1000, true) })
	b.Run("netlink-30000", func(b *testing.B) { benchmarkKernel(b, 30000, true) })
	b.Run("netlink-cold", func(b *testing.B) { benchmarkKernelCold(b, 10000) })
	b.Run("netlink-30000-cold", func(b *testing.B) { benchmarkKernelCold(b, 30000) })
}

func benchmarkKernel(b *testing.B, services int, netlink bool) {
	benchmarkKernelWith(b, services, netlink, nil)
}

// benchmarkKernelCold is benchmarkKernel's netlink loop with the CPU's
// caches evicted before each sync (not timed), as they are on a node
// where changes come a second apart or more.
func benchmarkKernelCold(b *testing.B, services int) {
	benchmarkKernelWith(b, services, true, evictCaches())
}

// evictCaches returns what evicts the CPU's caches: writing 64 MiB, twice
// the L3 of the machine the figures come from.
func evictCaches() func() {
	buf := make([]byte, 64<<20)
	return func() {
		for i := 0; i < len(buf); i += 64 {
			buf[i]++
		}
	}
}

func benchmarkKernelWith(b *testing.B, services int, netlink bool, evict func()) {
	var failure string
	inNetns(b, func(*netnstest.Netns) {
		nft, err := knftables.New(knftables.IPv4Family, "kpng")
		if err != nil {
			failure = err.Error()
			return
		}
		tb := newTable(ipv4, nftCommand{nft}, nftReader(knftables.IPv4Family, "kpng"))
		tb.count = netlinkCounter(ipv4, "kpng")
		if netlink {
			tb.nl = newNLTable(ipv4, "kpng")
			defer tb.nl.close()
		}
		be := NewBackend(testConfig(), tb)
		st := benchState(services, 10)
		ctx := context.Background()

		start := time.Now()
		if err := be.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
			failure = err.Error()
			return
		}
		cold := time.Since(start)
		coldOps := be.Last[0].Operations
		// The garbage returned after a full sync, as kubeproxy.RunBackend
		// does, timed.
		start = time.Now()
		debug.FreeOSMemory()
		coldRelease := time.Since(start)
		// The cold sync's peak (the state built before it is part of it,
		// as the API source's is in kpng), and what is left once it
		// returned its garbage.
		coldPeak, coldRSS := procstat.PeakRSSKiB(), procstat.RSSKiB()

		// A full resync: the table read back and compared.
		be.cfg.FullSyncPeriod = 0
		start = time.Now()
		if err := be.Sync(ctx, st, backend.Changes{Resync: true}); err != nil {
			failure = err.Error()
			return
		}
		resync := time.Since(start)
		debug.FreeOSMemory()
		// A periodic sync between full ones: the fixed chains' rules
		// counted through netlink.
		be.cfg.FullSyncPeriod = time.Hour
		start = time.Now()
		if err := be.Sync(ctx, st, backend.Changes{Resync: true}); err != nil || be.LastSyncFull() {
			failure = fmt.Sprintf("periodic sync: full %v, err %v", be.LastSyncFull(), err)
			return
		}
		periodic := time.Since(start)

		b.ResetTimer()
		ops, gen := 0, 0
		// The CPU time of this thread (the sync runs on it, locked in the
		// namespace), kernel included: unlike wall time, it does not count
		// waiting for a CPU on a loaded machine.
		cpu0 := threadCPU()
		for b.Loop() {
			gen++
			se := benchService(gen%services, 10, gen)
			k := backend.KeyOf(se)
			st.Services[k] = se
			if evict != nil {
				b.StopTimer()
				evict()
				b.StartTimer()
			}
			if err := be.Sync(ctx, st, backend.Changes{Set: []backend.ServiceKey{k}}); err != nil {
				failure = err.Error()
				return
			}
			ops = be.Last[0].Operations
			if be.Last[0].Netlink != netlink {
				failure = fmt.Sprintf("netlink: %v, want %v (%s)", be.Last[0].Netlink, netlink, be.Last[0].Fallback)
				return
			}
		}
		b.StopTimer()
		if evict == nil {
			// (With the eviction in the loop, the tick would charge its
			// time to the syncs.)
			b.ReportMetric(float64((threadCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/sync")
		}
		b.ReportMetric(float64(cold.Milliseconds()), "cold-sync-ms")
		b.ReportMetric(float64(coldOps), "cold-nft-ops")
		b.ReportMetric(float64(resync.Milliseconds()), "resync-ms")
		b.ReportMetric(float64(periodic.Microseconds()), "periodic-check-µs")
		b.ReportMetric(float64(ops), "nft-ops/sync")
		b.ReportMetric(float64(coldPeak)/1024, "cold-peak-rss-MiB")
		b.ReportMetric(float64(coldRSS)/1024, "rss-after-cold-MiB")
		b.ReportMetric(float64(coldRelease.Microseconds())/1000, "release-ms")
		b.ReportMetric(float64(procstat.RSSKiB())/1024, "rss-MiB")
		// The process's peak: the cold sync's or the full resync's.
		b.ReportMetric(float64(procstat.PeakRSSKiB())/1024, "peak-rss-MiB")
		// What the backend keeps (its mirror, the state's messages), once
		// the garbage of the cold sync is collected and returned.
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MiB")
		b.ReportMetric(float64(procstat.RSSKiB())/1024, "rss-after-gc-MiB")
		runtime.KeepAlive(be)
		runtime.KeepAlive(st)
	})
	if failure != "" {
		b.Fatalf("benchmark failed: %s", failure)
	}
}

// threadCPU is the calling thread's CPU time, user and system, to the
// nanosecond (the scheduler's account, CLOCK_THREAD_CPUTIME_ID).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// lastingConn is a netlink connection to nftables kept for the caller's
// run (close it with CloseLasting): the library's default opens a socket
// per Flush, which took 13 ms of wall time per transaction
// (BenchmarkKernelSharedMap's first runs).
func lastingConn() (*nftables.Conn, error) { return nftables.New(nftables.AsLasting()) }

// BenchmarkKernelShape measures what the kernel's cost of a one-element
// change (one delete and one add in one set, one transaction, as a
// replaced endpoint) owes to the rest of the namespace's nftables: N
// chains or N sets, in the changed set's table or in another one. It
// separates the two walks that make kpng's single changes grow with the
// number of services (docs/performance.md, "One endpoint change"):
// the commit visits every chain of every table, the element operation
// searches the sets of its own table by name. "cold" evicts the CPU's
// caches (evictCaches) before each change, as a node quiet for a
// second between changes has them; the eviction is not timed. Wall time
// only: the thread's CPU time would charge the eviction's to the change.
//
//	go test -tags e2e -run XXX -bench 'KernelShape' -benchtime 2000x ./backends/nft/
func BenchmarkKernelShape(b *testing.B) {
	for _, n := range []int{10000, 30000} {
		for _, c := range []struct {
			name                    string
			chains, sets, elsewhere bool
		}{
			{name: "chains", chains: true},
			{name: "sets", sets: true},
			{name: "chains-other-table", chains: true, elsewhere: true},
			{name: "sets-other-table", sets: true, elsewhere: true},
		} {
			for _, cold := range []bool{false, true} {
				name := fmt.Sprintf("%s-%d", c.name, n)
				if cold {
					name += "-cold"
				}
				b.Run(name, func(b *testing.B) {
					benchmarkShape(b, n, c.chains, c.sets, c.elsewhere, cold)
				})
			}
		}
	}
}

func benchmarkShape(b *testing.B, n int, chains, sets, elsewhere, cold bool) {
	var failure string
	inNetns(b, func(ns *netnstest.Netns) {
		// Table t holds the changed set "s"; the N chains or sets are in
		// t (before "s" in its list of sets, as the services' maps are
		// before most of theirs on average) or in table u.
		var in strings.Builder
		in.WriteString("add table ip t\nadd table ip u\n")
		where := "t"
		if elsewhere {
			where = "u"
		}
		for i := range n {
			if chains {
				fmt.Fprintf(&in, "add chain ip %s c-%d\n", where, i)
			}
			if sets {
				fmt.Fprintf(&in, "add set ip %s s-%d { type ipv4_addr; }\n", where, i)
			}
		}
		in.WriteString("add set ip t s { type ipv4_addr; }\nadd element ip t s { 10.0.0.0 }\n")
		if out, err := ns.RunInput(in.String(), "nft", "-f", "-"); err != nil {
			failure = fmt.Sprintf("loading the tables: %v: %s", err, out)
			return
		}
		w := newNLTable(ipv4, "t")
		defer w.close()
		def := &set{name: "s", typ: "ipv4_addr"}
		sets := func(string) *set { return def }
		elem := func(i int) *elem {
			return &elem{elemID: elemID{set: "s", key: fmt.Sprintf("10.0.%d.%d", i/256%256, i%256)}}
		}
		var evict func()
		if cold {
			evict = evictCaches()
		}
		ctx := context.Background()
		i := 0
		for b.Loop() {
			msgs, err := w.encode([]op{{verb: opDelete, elem: elem(i)}, {verb: opAdd, elem: elem(i + 1)}}, sets)
			if err != nil {
				failure = err.Error()
				return
			}
			if evict != nil {
				b.StopTimer()
				evict()
				b.StartTimer()
			}
			if err := w.send(ctx, msgs); err != nil {
				failure = fmt.Sprintf("change %d: %v", i, err)
				return
			}
			i++
		}
	})
	if failure != "" {
		b.Fatalf("benchmark failed: %s", failure)
	}
}
