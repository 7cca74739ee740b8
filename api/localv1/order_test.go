package localv1

import (
	"slices"
	"testing"
)

func TestCompareEndpoints(t *testing.T) {
	ep := func(name string, proto Protocol, ip string, port int32) *Endpoint {
		return &Endpoint{PortName: name, Protocol: proto, Ip: ip, Port: port}
	}
	for _, tc := range []struct {
		name string
		a, b *Endpoint
		want int
	}{
		{"port name first", ep("a", Protocol_UDP, "10.0.0.9", 9), ep("b", Protocol_TCP, "10.0.0.1", 1), -1},
		{"then protocol", ep("p", Protocol_TCP, "10.0.0.9", 9), ep("p", Protocol_UDP, "10.0.0.1", 1), -1},
		{"then address, as text", ep("p", Protocol_TCP, "10.0.0.10", 1), ep("p", Protocol_TCP, "10.0.0.9", 1), -1},
		{"then port: one address on two ports is two endpoints", ep("p", Protocol_TCP, "10.0.0.1", 8080), ep("p", Protocol_TCP, "10.0.0.1", 80), 1},
		{"readiness does not order", &Endpoint{PortName: "p", Ip: "10.0.0.1", InClusterSet: true}, &Endpoint{PortName: "p", Ip: "10.0.0.1"}, 0},
	} {
		if got := CompareEndpoints(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: CompareEndpoints = %d, want %d", tc.name, got, tc.want)
		}
		if got := CompareEndpoints(tc.b, tc.a); got != -tc.want {
			t.Errorf("%s: reversed: %d, want %d", tc.name, got, -tc.want)
		}
	}
	eps := []*Endpoint{ep("p", Protocol_TCP, "10.0.0.2", 80), ep("", Protocol_UDP, "10.0.0.1", 53), ep("p", Protocol_TCP, "10.0.0.1", 80)}
	slices.SortFunc(eps, CompareEndpoints)
	if eps[0].PortName != "" || eps[1].Ip != "10.0.0.1" || eps[2].Ip != "10.0.0.2" {
		t.Errorf("sorted: %v", eps)
	}
}
