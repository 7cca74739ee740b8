package iptables

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// discard is a runner that keeps nothing: the benchmarks measure building
// the restore input, not iptables-restore. Its tables read as tables (nil:
// empty), delivered as a command's output is. With measure set, it records
// the live heap when iptables-save's output is read and when the restore
// input is written (the peaks of a sync).
type discard struct {
	bytes          int
	tables         []byte
	measure        bool
	atSave, atPeak uint64
}

func (d *discard) restore(_ context.Context, in input) error {
	n, err := in.WriteTo(io.Discard)
	d.bytes = int(n)
	if d.measure {
		d.atPeak = liveHeap()
		runtime.KeepAlive(in) // iptables-restore reads it meanwhile
	}
	return err
}
func (d *discard) save(_ context.Context, w io.Writer) error {
	// As exec.Cmd copies a command's output to its Stdout.
	_, err := io.Copy(w, struct{ io.Reader }{bytes.NewReader(d.tables)})
	if d.measure {
		d.atSave = liveHeap()
	}
	return err
}

// savedTables10k is iptables-save's output once st is written.
func savedTables10k(b *testing.B, st *backend.State) []byte {
	f := newFakeTables()
	mustSync(b, newProxier(false, testConfig(), f), st, backend.Changes{Reset: true})
	return []byte(f.dump())
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// mib is the difference of two heap sizes in MiB.
func mib(after, before uint64) float64 { return float64(int64(after)-int64(before)) / (1 << 20) }

// measureHeap measures the backend's heap beyond the state it is given
// (and the tables its runner reads, see discard): live after a cold sync
// of st (what it keeps between syncs), and the larger of the live heaps
// once iptables-save's output is read and once the restore input is
// written, in the sync that sync runs next (what that sync holds at its
// peak). Run before the benchmark's loop, so that nothing else is live.
func measureHeap(b *testing.B, st *backend.State, tables []byte, sync func(p *proxier)) (live, peak float64) {
	b.Helper()
	before := liveHeap()
	d := &discard{}
	p := newProxier(false, testConfig(), d)
	mustSync(b, p, st, backend.Changes{Reset: true})
	live = mib(liveHeap(), before)
	d.measure, d.tables = true, tables
	sync(p)
	runtime.KeepAlive(p)
	return live, mib(max(d.atSave, d.atPeak), before)
}

// reportHeap reports measureHeap's figures.
func reportHeap(b *testing.B, live, peak float64) {
	b.ReportMetric(live, "live-MiB")
	b.ReportMetric(peak, "peak-live-MiB")
}

// bigState is n ClusterIP services of m endpoints each (as the brain and
// backend benchmarks use: 10,000 x 10).
func bigState(n, m int) *backend.State {
	st := newState()
	for i := range n {
		var eps []*localv1.Endpoint
		for j := range m {
			eps = append(eps, ep(fmt.Sprintf("10.%d.%d.%d", 128+i/65536, (i/256)%256, i%256), int32(8000+j), j == 0))
			eps[j].Ip = fmt.Sprintf("10.%d.%d.%d", 100+j, i/256, i%256)
		}
		se := named(fmt.Sprintf("svc-%05d", i), fmt.Sprintf("10.96.%d.%d", i/256, i%256), nil, eps...)
		st.Services[backend.KeyOf(se)] = se
	}
	return st
}

// BenchmarkFullSync10kServices builds the restore input of a full sync of
// 10,000 services x 10 endpoints.
func BenchmarkFullSync10kServices(b *testing.B) {
	st := bigState(10000, 10)
	live, peak := measureHeap(b, st, nil, func(p *proxier) { mustSync(b, p, st, backend.Changes{Reset: true}) })
	d := &discard{}
	p := newProxier(false, testConfig(), d)
	b.ReportAllocs()
	for b.Loop() {
		mustSync(b, p, st, backend.Changes{Reset: true})
	}
	b.ReportMetric(float64(d.bytes), "restore-bytes")
	reportHeap(b, live, peak)
}

// BenchmarkOneEndpointChange10kServices builds the restore input of a sync
// after one endpoint of one service changed, at 10,000 services x 10
// endpoints.
func BenchmarkOneEndpointChange10kServices(b *testing.B) {
	st := bigState(10000, 10)
	d := &discard{}
	p := newProxier(false, testConfig(), d)
	mustSync(b, p, st, backend.Changes{Reset: true})
	flip := newEndpointFlip(st, 10000)
	b.ReportAllocs()
	for b.Loop() {
		flip.partialSync(b, context.Background(), p)
	}
	b.ReportMetric(float64(d.bytes), "restore-bytes")
}

// endpointFlip changes one endpoint of the middle service of a bigState
// back and forth, one partial sync at a time.
type endpointFlip struct {
	st        *backend.State
	key       backend.ServiceKey
	orig, alt *localv1.ServiceEndpoints
	i         int
}

func newEndpointFlip(st *backend.State, services int) *endpointFlip {
	key := backend.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("svc-%05d", services/2), Family: localv1.IPFamily_IPV4}
	orig := st.Services[key]
	alt := named(key.Name, orig.Service.ClusterIp, nil, append(orig.Endpoints[:9:9], ep("10.250.0.1", 8009, false))...)
	return &endpointFlip{st: st, key: key, orig: orig, alt: alt}
}

// partialSync flips the endpoint and syncs p, which must sync partially.
func (f *endpointFlip) partialSync(b *testing.B, ctx context.Context, p *proxier) syncResult {
	b.Helper()
	f.st.Services[f.key] = f.alt
	if f.i%2 == 1 {
		f.st.Services[f.key] = f.orig
	}
	f.i++
	res, err := p.sync(ctx, f.st, backend.Changes{Set: []backend.ServiceKey{f.key}})
	if err != nil || res.full {
		b.Fatalf("partial sync: %+v %v", res, err)
	}
	return res
}

// BenchmarkResync10kServices runs a periodic full resync at 10,000
// services x 10 endpoints, nothing having changed: iptables-save's output
// of those tables read, every chain rewritten.
func BenchmarkResync10kServices(b *testing.B) {
	st := bigState(10000, 10)
	tables := savedTables10k(b, st)
	live, peak := measureHeap(b, st, tables, func(p *proxier) { mustSync(b, p, st, backend.Changes{Resync: true}) })
	d := &discard{tables: tables}
	p := newProxier(false, testConfig(), d)
	mustSync(b, p, st, backend.Changes{Reset: true})
	b.ReportAllocs()
	for b.Loop() {
		mustSync(b, p, st, backend.Changes{Resync: true})
	}
	b.ReportMetric(float64(d.bytes), "restore-bytes")
	reportHeap(b, live, peak)
}
