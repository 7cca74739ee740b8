package ipvs

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// BenchmarkEndpointChangeFake is BenchmarkKernel's loop on the Fake IPVS
// and kernel: the backend's own cost of one endpoint change at 10,000
// services, without the kernel's. Run on the host and in hack/vm.sh's
// VM, it also tells how much slower the emulated VM runs the same code.
//
//	go test -run XXX -bench EndpointChangeFake ./backends/ipvs
func BenchmarkEndpointChangeFake(b *testing.B) {
	const services, endpoints = 10000, 10
	cfg := DefaultConfig()
	cfg.IPFamilies = []string{"ipv4"}
	cfg.ClusterCIDRs = []string{"10.0.0.0/8"}
	if err := cfg.validate(); err != nil {
		b.Fatal(err)
	}
	be := New(&cfg, NewFake(), newFakeKernel())
	var list []*localv1.ServiceEndpoints
	for i := range services {
		list = append(list, benchService(i, endpoints, false))
	}
	st := stateOf(list...)
	ctx := context.Background()
	if err := be.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
		b.Fatal(err)
	}
	gen := 0
	// The loop runs on one thread: its CPU time, unlike wall time, does not
	// count waiting for a CPU on a loaded machine.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU()
	for b.Loop() {
		gen++
		se := benchService(((gen-1)/2)%services, endpoints, gen%2 == 1)
		st.Services[backend.KeyOf(se)] = se
		if err := be.Sync(ctx, st, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(se)}}); err != nil {
			b.Fatal(err)
		}
		if o := be.lastOps(); o.Total() != 1 {
			b.Fatalf("one endpoint change made %+v", o)
		}
	}
	b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N), "thread-cpu-ns/op")
}

// benchService is service i of 10.96.0.0/12 with n endpoints (one more
// with extra), each on a node of its own.
func benchService(i, n int, extra bool) *localv1.ServiceEndpoints {
	var eps []*localv1.Endpoint
	if extra {
		n++
	}
	for j := range n {
		eps = append(eps, ep(fmt.Sprintf("10.%d.%d.%d", 128+j, i/250, i%250+1), 8080, false))
	}
	return service("bench", fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.%d.%d.%d", 96+i/62500, i/250%250, i%250+1), withEndpoints(eps...))
}

// threadCPU is the CPU time of this thread (user and kernel).
func threadCPU() time.Duration {
	var r unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &r); err != nil {
		return 0
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
