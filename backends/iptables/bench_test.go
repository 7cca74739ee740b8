package iptables

import (
	"context"
	"fmt"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// discard is a runner that keeps nothing: the benchmarks measure building
// the restore input, not iptables-restore.
type discard struct{ bytes int }

func (d *discard) restore(_ context.Context, data []byte) error { d.bytes = len(data); return nil }
func (d *discard) save(context.Context) ([]byte, error)         { return nil, nil }

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
	d := &discard{}
	p := newProxier(false, testConfig(), d)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.sync(context.Background(), st, backend.Changes{Reset: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(d.bytes), "restore-bytes")
}

// BenchmarkOneEndpointChange10kServices builds the restore input of a sync
// after one endpoint of one service changed, at 10,000 services x 10
// endpoints.
func BenchmarkOneEndpointChange10kServices(b *testing.B) {
	st := bigState(10000, 10)
	d := &discard{}
	p := newProxier(false, testConfig(), d)
	if _, err := p.sync(context.Background(), st, backend.Changes{Reset: true}); err != nil {
		b.Fatal(err)
	}
	key := backend.ServiceKey{Namespace: "ns", Name: "svc-05000", Family: localv1.IPFamily_IPV4}
	orig := st.Services[key]
	alt := named(key.Name, orig.Service.ClusterIp, nil, append(orig.Endpoints[:9:9], ep("10.250.0.1", 8009, false))...)
	ch := backend.Changes{Set: []backend.ServiceKey{key}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			st.Services[key] = alt
		} else {
			st.Services[key] = orig
		}
		i++
		res, err := p.sync(context.Background(), st, ch)
		if err != nil || res.full {
			b.Fatalf("partial sync: %+v %v", res, err)
		}
	}
	b.ReportMetric(float64(d.bytes), "restore-bytes")
}

// BenchmarkResync10kServices builds the restore input of a periodic resync
// (everything rewritten, from the record) at 10,000 services x 10
// endpoints, nothing having changed.
func BenchmarkResync10kServices(b *testing.B) {
	st := bigState(10000, 10)
	d := &discard{}
	p := newProxier(false, testConfig(), d)
	if _, err := p.sync(context.Background(), st, backend.Changes{Reset: true}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.sync(context.Background(), st, backend.Changes{Resync: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(d.bytes), "restore-bytes")
}
