//go:build e2e

package nft

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

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
}

func benchmarkKernel(b *testing.B, services int, netlink bool) {
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
		b.ReportMetric(float64((threadCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/sync")
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

// threadCPU is the calling thread's CPU time, user and system.
func threadCPU() time.Duration {
	var r unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &r); err != nil {
		return 0
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
