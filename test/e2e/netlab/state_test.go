package netlab

import (
	"bytes"
	"net/netip"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kpng/kpng/source/file"
)

// fakeLab is a lab's description without namespaces, enough for a State.
func fakeLab() *Lab {
	l := &Lab{}
	for i, name := range []string{"node-1", "node-2"} {
		n := &Node{Host: Host{Name: name,
			IPv4: netip.AddrFrom4([4]byte{192, 168, 77, byte(10 + i)}),
			IPv6: netip.MustParseAddr("fd00:77::10").Next()}, Index: i,
			PodCIDRs: []netip.Prefix{
				netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 0}), 24),
				netip.MustParsePrefix("fd00:10:244:1::/64"),
			}}
		p := &Pod{Host: Host{Name: "pod-" + name,
			IPv4: netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 10}),
			IPv6: netip.MustParseAddr("fd00:10:244:1::10")}, Node: n}
		n.Pods = []*Pod{p}
		l.Nodes = append(l.Nodes, n)
	}
	return l
}

// TestStateIsReadByTheFileSource checks that what the builder writes is
// what kpng's file source reads, with nothing skipped: nodes, the service
// CIDR, services of each kind, and endpoint slices per family.
func TestStateIsReadByTheFileSource(t *testing.T) {
	l := fakeLab()
	s := NewState(t, l)
	web := s.AddService("web", TCPPort("http", 80, 8080), UDPPort("dns", 53, 8080))
	np := s.AddService("np", TCPPort("http", 80, 8080))
	np.Spec.Type = corev1.ServiceTypeNodePort
	np.Spec.Ports[0].NodePort = 30080
	np.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.SetEndpoints(web, Ready(l.Nodes[0].Pods[0])...)
	s.SetEndpoints(web, append(Ready(l.Nodes[1].Pods[0]), Terminating(l.Nodes[0].Pods[0])...)...)
	s.SetEndpoints(np, Ready(l.Nodes[0].Pods[0])...)
	s.Write(t)

	if got, want := ClusterIP(web, 4, 80), netip.MustParseAddrPort("10.96.0.10:80"); got != want {
		t.Errorf("web IPv4 cluster IP %v, want %v", got, want)
	}
	if got, want := ClusterIP(np, 6, 80), netip.MustParseAddrPort("[fd00:10:96::b]:80"); got != want {
		t.Errorf("np IPv6 cluster IP %v, want %v", got, want)
	}
	b, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	objs, problems, err := file.Parse(bytes.NewReader(b))
	if err != nil || len(problems) > 0 {
		t.Fatalf("parse: %v %v\n%s", err, problems, b)
	}
	if len(objs.Nodes) != 2 || len(objs.ServiceCIDRs) != 1 || len(objs.Services) != 2 || len(objs.EndpointSlices) != 4 {
		t.Fatalf("read %d nodes, %d service CIDRs, %d services, %d slices; want 2, 1, 2, 4 (SetEndpoints replaces)\n%s",
			len(objs.Nodes), len(objs.ServiceCIDRs), len(objs.Services), len(objs.EndpointSlices), b)
	}
	for _, sl := range objs.EndpointSlices {
		if sl.Name != "web-v4" {
			continue
		}
		if len(sl.Endpoints) != 2 {
			t.Fatalf("web-v4: %v", sl)
		}
		ready, term := sl.Endpoints[0], sl.Endpoints[1]
		if ready.Addresses[0] != "10.244.2.10" || !ready.GetReady() || ready.GetTerminating() || ready.NodeName != "node-2" || ready.Zone != "zone-b" {
			t.Errorf("ready endpoint: %v", ready)
		}
		if term.Addresses[0] != "10.244.1.10" || term.GetReady() || !term.GetServing() || !term.GetTerminating() || term.NodeName != "node-1" {
			t.Errorf("terminating endpoint: %v", term)
		}
	}
}
