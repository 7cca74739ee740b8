//go:build e2e

package ipvs

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/cloudflare/ipvs"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"
)

// BenchmarkKernel runs against real IPVS in a namespace of its own, at
// 10,000 services of 10 endpoints each: the cold sync (reported once), a
// periodic sync (the cheap check), a full one, then one endpoint change
// per loop (an endpoint added, then removed: weight 0), with the kernel
// operations each makes. IPVS exists only in the VM's kernel:
//
//	go test -c -tags e2e -o /tmp/ipvs.test ./backends/ipvs
//	cd backends/ipvs && VM_MODULES=ip_vs ../../hack/vm.sh /tmp/ipvs.test -test.run XXX -test.bench Kernel -test.benchtime 200x
func BenchmarkKernel(b *testing.B) {
	const services, endpoints = 10000, 10
	ns := netnstest.New(b, "ipvs")
	var failure string
	err := ns.Do(func() error {
		c, err := ipvs.New()
		if err != nil {
			return err
		}
		defer c.(io.Closer).Close()
		cfg := DefaultConfig()
		cfg.IPFamilies = []string{"ipv4"}
		cfg.ClusterCIDRs = []string{"10.0.0.0/8"}
		if err := cfg.validate(); err != nil {
			return err
		}
		if err := setupKernel(context.Background(), &cfg, c); err != nil {
			return err
		}
		be := New(&cfg, c, &hostKernel{})
		ctx := context.Background()
		var list []*localv1.ServiceEndpoints
		for i := range services {
			list = append(list, benchService(i, endpoints, false))
		}
		st := stateOf(list...)

		start, cpu0 := time.Now(), threadCPU()
		if err := be.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
			return err
		}
		b.Logf("cold sync of %d services x %d endpoints: %v (thread CPU %v), %+v", services, endpoints, time.Since(start).Round(time.Millisecond), (threadCPU() - cpu0).Round(time.Millisecond), be.lastOps())

		start, cpu0 = time.Now(), threadCPU()
		if err := be.Sync(ctx, st, backend.Changes{Resync: true}); err != nil || be.LastSyncFull() {
			return fmt.Errorf("periodic sync: full %v, err %v", be.LastSyncFull(), err)
		}
		b.Logf("periodic sync (one dump of the virtual servers and of kube-ipvs0's addresses): %v (thread CPU %v)", time.Since(start).Round(time.Millisecond), (threadCPU() - cpu0).Round(time.Millisecond))

		cfg.FullSyncPeriod = 0
		start, cpu0 = time.Now(), threadCPU()
		if err := be.Sync(ctx, st, backend.Changes{Resync: true}); err != nil || !be.LastSyncFull() {
			return fmt.Errorf("full sync: full %v, err %v", be.LastSyncFull(), err)
		}
		b.Logf("full resync (everything read back; nothing to fix): %v (thread CPU %v), %+v", time.Since(start).Round(time.Millisecond), (threadCPU() - cpu0).Round(time.Millisecond), be.lastOps())
		cfg.FullSyncPeriod = time.Hour

		b.ResetTimer()
		gen, ops := 0, 0
		cpu0 = threadCPU()
		for b.Loop() {
			gen++
			i := ((gen - 1) / 2) % services
			se := benchService(i, endpoints, gen%2 == 1) // odd: one endpoint more; even: back
			st.Services[backend.KeyOf(se)] = se
			if err := be.Sync(ctx, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(se)}}); err != nil {
				failure = err.Error()
				return nil
			}
			if o := be.lastOps(); o.CreateDest+o.UpdateDest+o.RemoveDest != 1 || o.Total() != 1 {
				failure = fmt.Sprintf("one endpoint change made %+v", o)
				return nil
			}
			ops += be.lastOps().Total()
		}
		b.ReportMetric(float64(ops)/float64(b.N), "kernel-ops/op")
		b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N), "thread-cpu-ns/op")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if failure != "" {
		b.Fatal(failure)
	}
}
