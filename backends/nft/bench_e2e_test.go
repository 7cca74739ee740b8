//go:build e2e

package nft

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/backend"
)

// BenchmarkKernel runs against real nftables in a namespace of its own, at
// 10,000 services of 10 endpoints: the cold sync (reported once), then a
// sync after one endpoint change (the loop), with the nft operations each
// sends and the process's RSS.
//
//	go test -tags e2e -run XXX -bench Kernel ./backends/nft/
func BenchmarkKernel(b *testing.B) {
	t := &testing.T{}
	var failure string
	inNetns(t, func(string) {
		nft, err := knftables.New(knftables.IPv4Family, "kpng")
		if err != nil {
			failure = err.Error()
			return
		}
		be := NewBackend(testConfig(), newTable(ipv4, nft, nftReader(knftables.IPv4Family, "kpng")))
		st := benchState(10000, 10)
		ctx := context.Background()

		start := time.Now()
		if err := be.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
			failure = err.Error()
			return
		}
		cold := time.Since(start)
		coldOps := be.Last[0].Operations

		start = time.Now()
		if err := be.Sync(ctx, st, backend.Changes{Resync: true}); err != nil {
			failure = err.Error()
			return
		}
		resync := time.Since(start)

		b.ResetTimer()
		ops, gen := 0, 0
		for b.Loop() {
			gen++
			se := benchService(gen%10000, 10, gen)
			k := backend.KeyOf(se)
			st.Services[k] = se
			if err := be.Sync(ctx, st, backend.Changes{Set: []backend.ServiceKey{k}}); err != nil {
				failure = err.Error()
				return
			}
			ops = be.Last[0].Operations
		}
		b.StopTimer()
		b.ReportMetric(float64(cold.Milliseconds()), "cold-sync-ms")
		b.ReportMetric(float64(coldOps), "cold-nft-ops")
		b.ReportMetric(float64(resync.Milliseconds()), "resync-ms")
		b.ReportMetric(float64(ops), "nft-ops/sync")
		b.ReportMetric(float64(rssKiB())/1024, "rss-MiB")
	})
	if failure != "" || t.Failed() {
		b.Fatalf("benchmark failed: %s", failure)
	}
}

// rssKiB is the process's resident set size.
func rssKiB() int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}
