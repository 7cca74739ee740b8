package nft

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// discard accepts every transaction without applying it, or even making
// it a knftables.Transaction: the benchmarks measure what this backend does
// (computing the transaction), not nft; BenchmarkFullSyncWritten adds
// writing it.
type discard struct{ *knftables.Fake }

func (discard) runOps(context.Context, []op) error { return nil }

// benchState is n services of eps endpoints each (IPv4).
func benchState(n, eps int) *backend.State {
	st := backend.NewState("node-a")
	st.Node = testNode
	st.ServiceCIDRs = []string{"10.96.0.0/12"}
	for i := range n {
		se := benchService(i, eps, 0)
		st.Services[backend.KeyOf(se)] = se
	}
	return st
}

// benchService is service i; gen changes the address of its first endpoint.
func benchService(i, eps, gen int) *localv1.ServiceEndpoints {
	se := service("bench", fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.%d.%d.%d", 96+i/65536, i/256%256, i%256),
		port("http", tcp, 80, 0, true))
	for j := range eps {
		ip := fmt.Sprintf("10.%d.%d.%d", 128+j, i/256%256, i%256)
		if j == 0 && gen > 0 {
			ip = fmt.Sprintf("10.%d.%d.%d", 160+gen%32, i/256%256, i%256)
		}
		ep("http", tcp, ip, 8080, "cluster")(se)
	}
	return se
}

func benchBackend() *Backend {
	fake := knftables.NewFake(knftables.IPv4Family, "kpng")
	empty := func(context.Context) (*snapshot, error) { return newSnapshot(), nil }
	return NewBackend(testConfig(), newTable(ipv4, discard{fake}, empty))
}

// BenchmarkFullSync: the first sync of 10,000 services of 10 endpoints:
// building the whole ruleset and its transaction.
func BenchmarkFullSync(b *testing.B) {
	st := benchState(10000, 10)
	mirror := mirrorHeap(b, st)
	b.ReportAllocs()
	ops := 0
	for b.Loop() {
		be := benchBackend()
		coldSync(b, be, st)
		ops = be.Last[0].Operations
	}
	b.ReportMetric(float64(ops), "nft-ops/sync")
	b.ReportMetric(mirror, "mirror-MiB")
}

// mirrorHeap is the live heap a backend keeps after its cold sync of st
// (its mirror of the table): what the process holds for it from then on.
// Run it before a benchmark's loop: measured after it, it was some 20 MiB
// short (a backend of the loop still live when it starts, freed during).
func mirrorHeap(b testing.TB, st *backend.State) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	be := benchBackend()
	coldSync(b, be, st)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(be)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
}

// written runs transactions as nftCommand does up to the nft process: it
// renders nft's input and copies it to io.Discard, as nftCommand copies it
// to nft's standard input. With measure set, it records the largest live
// heap seen when the input starts being written and once it is all written
// (the peak of a cold sync, when the whole transaction exists).
type written struct {
	knftables.Interface
	bytes   int64
	measure bool
	atPeak  uint64
}

func (w *written) runOps(_ context.Context, ops []op) error {
	in := nftCommand{w.Interface}.input(ops)
	probe := &heapProbe{measure: w.measure}
	// As the copy to nft's standard input (an *os.File) goes: through
	// the reader's WriteTo when it has one, else in 32 KiB reads.
	var err error
	w.bytes, err = io.Copy(probe, in)
	if w.measure {
		probe.sample()
		w.atPeak = max(w.atPeak, probe.peak)
	}
	runtime.KeepAlive(in) // nft reads it meanwhile
	return err
}

// heapProbe discards what is written to it, noting the live heap at the
// first write.
type heapProbe struct {
	measure bool
	writes  int
	peak    uint64
}

func (h *heapProbe) Write(p []byte) (int, error) {
	if h.writes++; h.writes == 1 && h.measure {
		h.sample()
	}
	return len(p), nil
}

func (h *heapProbe) sample() { h.peak = max(h.peak, liveHeap()) }

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkFullSyncWritten is BenchmarkFullSync including what the nft
// command path does with the transaction up to the nft process: render
// its text and write it out (see written). peak-live-MiB is the live heap
// beyond the state while the text is written, where a cold sync peaks;
// input-MiB is the text nft reads.
func BenchmarkFullSyncWritten(b *testing.B) {
	st := benchState(10000, 10)
	newBackend := func(w *written) *Backend {
		empty := func(context.Context) (*snapshot, error) { return newSnapshot(), nil }
		return NewBackend(testConfig(), newTable(ipv4, w, empty))
	}
	fake := knftables.NewFake(knftables.IPv4Family, "kpng")
	before := liveHeap()
	w := &written{Interface: fake, measure: true}
	coldSync(b, newBackend(w), st)
	peak := float64(int64(w.atPeak)-int64(before)) / (1 << 20)

	b.ReportAllocs()
	w = &written{Interface: fake}
	for b.Loop() {
		coldSync(b, newBackend(w), st)
	}
	b.ReportMetric(float64(w.bytes)/(1<<20), "input-MiB")
	b.ReportMetric(peak, "peak-live-MiB")
}

// BenchmarkOneEndpointChange: at 10,000 services of 10 endpoints, one
// endpoint of one service changes.
func BenchmarkOneEndpointChange(b *testing.B) {
	st := benchState(10000, 10)
	be := benchBackend()
	coldSync(b, be, st)
	b.ReportAllocs()
	ops, gen := 0, 0
	for b.Loop() {
		gen++
		changeOneEndpoint(b, be, st, gen)
		ops = be.Last[0].Operations
	}
	b.ReportMetric(float64(ops), "nft-ops/sync")
}

// BenchmarkOneEndpointChangeNetlink is BenchmarkOneEndpointChange with the
// transaction encoded into netlink messages and sent to a fake kernel: all
// the work of the process on the netlink path.
func BenchmarkOneEndpointChangeNetlink(b *testing.B) {
	st := benchState(10000, 10)
	be := benchBackend()
	kern := &fakeKernel{}
	tb := be.tables[0]
	tb.nl = newNLTable(tb.fam, "kpng")
	tb.nl.dial = kern.dial
	coldSync(b, be, st)
	b.ReportAllocs()
	gen := 0
	for b.Loop() {
		gen++
		changeOneEndpoint(b, be, st, gen)
		if !be.Last[0].Netlink {
			b.Fatalf("not written through netlink: %+v", be.Last[0])
		}
		kern.batches = kern.batches[:0]
	}
}

// coldSync is be's first sync of st.
func coldSync(b testing.TB, be *Backend, st *backend.State) {
	b.Helper()
	if err := be.Sync(context.Background(), st, backend.Changes{Reset: true}); err != nil {
		b.Fatal(err)
	}
}

// changeOneEndpoint changes one endpoint of one of st's 10,000 services
// (which, by gen) and syncs be.
func changeOneEndpoint(b *testing.B, be *Backend, st *backend.State, gen int) {
	b.Helper()
	se := benchService(gen%10000, 10, gen)
	k := backend.KeyOf(se)
	st.Services[k] = se
	if err := be.Sync(context.Background(), st, backend.Changes{Set: []backend.ServiceKey{k}}); err != nil {
		b.Fatal(err)
	}
}
