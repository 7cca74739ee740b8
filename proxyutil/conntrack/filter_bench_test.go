package conntrack

import (
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

func bigState(n int) *backend.State {
	st := backend.NewState("n1")
	v4 := localv1.IPFamily_IPV4
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		se := &localv1.ServiceEndpoints{Service: &localv1.Service{Namespace: "ns", Name: name, Family: v4,
			ClusterIp: fmt.Sprintf("10.96.%d.%d", i/250, i%250),
			Ports:     []*localv1.ServicePort{{Name: "dns", Protocol: localv1.Protocol_UDP, Port: 53}}}}
		for j := range 10 {
			se.Endpoints = append(se.Endpoints, ep("dns", fmt.Sprintf("10.%d.%d.%d", 100+j, i/250, i%250), 5353, true, true))
		}
		st.Services[backend.ServiceKey{Namespace: "ns", Name: name, Family: v4}] = se
	}
	return st
}

// BenchmarkNewFilter: building the filter for 10,000 UDP services x 10
// endpoints, which each cleanup does once.
func BenchmarkNewFilter(b *testing.B) {
	st := bigState(10000)
	b.ResetTimer()
	for range b.N {
		NewFilter(st, localv1.IPFamily_IPV4, false)
	}
}

// BenchmarkMatch: deciding one flow, which each cleanup does per flow of
// the table.
func BenchmarkMatch(b *testing.B) {
	f := NewFilter(bigState(10000), localv1.IPFamily_IPV4, false)
	fl := []*netlink.ConntrackFlow{
		flow(unix.IPPROTO_UDP, "10.2.0.1", "10.96.3.7", 53, "10.100.3.7", 5353),
		flow(unix.IPPROTO_UDP, "10.2.0.1", "10.96.3.7", 53, "10.250.3.7", 5353),
		flow(unix.IPPROTO_TCP, "10.2.0.1", "10.3.0.1", 443, "10.3.0.1", 443),
	}
	b.ResetTimer()
	for i := range b.N {
		f.MatchConntrackFlow(fl[i%len(fl)])
	}
}

// BenchmarkFilterUpdateOneChange: what OnSync does to its filter when one
// of 10,000 UDP services changes.
func BenchmarkFilterUpdateOneChange(b *testing.B) {
	st := bigState(10000)
	f := NewFilter(st, localv1.IPFamily_IPV4, false)
	k := backend.ServiceKey{Namespace: "ns", Name: "s42", Family: localv1.IPFamily_IPV4}
	ch := backend.Changes{Set: []backend.ServiceKey{k}}
	b.ResetTimer()
	for range b.N {
		f.Update(st, ch)
	}
}
