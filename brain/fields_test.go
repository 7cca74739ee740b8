package brain

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
)

func TestServiceFieldsSplitPerFamily(t *testing.T) {
	in := svc(
		clusterIPs("10.96.0.1", "fd00::1"),
		svcType(globalv1.ServiceType_LOAD_BALANCER),
		etpLocal,
		externalIPs("192.0.2.10", "2001:db8::10"),
		func(s *globalv1.Service) {
			s.HealthCheckNodePort = 31000
			s.ClientIpAffinitySeconds = 600
			s.LoadBalancerIngress = []*globalv1.LoadBalancerIngress{
				{Ip: "198.51.100.1"},
				{Ip: "198.51.100.2", IpModeProxy: true},
				{Ip: "2001:db8::1"},
			}
			s.LoadBalancerSourceRanges = []string{"203.0.113.0/24", "2001:db8:1::/48"}
		},
	)
	got := ServiceView(in, nil, Node{Name: "me"}, Options{})
	want := []*localv1.ServiceEndpoints{
		{Service: &localv1.Service{
			Namespace: "ns", Name: "web", Family: localv1.IPFamily_IPV4, Type: localv1.ServiceType_LOAD_BALANCER,
			ClusterIp:                "10.96.0.1",
			ExternalIps:              []string{"192.0.2.10"},
			LoadBalancerIps:          []string{"198.51.100.1"},
			LoadBalancerSourceRanges: []string{"203.0.113.0/24"},
			Ports: []*localv1.ServicePort{{
				Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, NodePort: 30080, TargetPort: 8080,
			}},
			ClientIpAffinitySeconds: 600,
			ExternalTrafficPolicy:   localv1.TrafficPolicy_LOCAL,
			HealthCheckNodePort:     31000,
		}},
		{Service: &localv1.Service{
			Namespace: "ns", Name: "web", Family: localv1.IPFamily_IPV6, Type: localv1.ServiceType_LOAD_BALANCER,
			ClusterIp:                "fd00::1",
			ExternalIps:              []string{"2001:db8::10"},
			LoadBalancerIps:          []string{"2001:db8::1"},
			LoadBalancerSourceRanges: []string{"2001:db8:1::/48"},
			Ports: []*localv1.ServicePort{{
				Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, NodePort: 30080, TargetPort: 8080,
			}},
			ClientIpAffinitySeconds: 600,
			ExternalTrafficPolicy:   localv1.TrafficPolicy_LOCAL,
			HealthCheckNodePort:     31000,
		}},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("view (-want +got):\n%s", d)
	}
}

func TestServiceFieldRules(t *testing.T) {
	v4 := func(s *globalv1.Service) *localv1.Service {
		views := ServiceView(s, nil, Node{Name: "me"}, Options{})
		if len(views) == 0 {
			t.Fatalf("no view")
		}
		return views[0].Service
	}
	t.Run("a zero-length source range admits everyone", func(t *testing.T) {
		s := v4(svc(svcType(globalv1.ServiceType_LOAD_BALANCER), func(s *globalv1.Service) {
			s.LoadBalancerSourceRanges = []string{"203.0.113.0/24", "0.0.0.0/0"}
		}))
		if len(s.LoadBalancerSourceRanges) != 0 {
			t.Errorf("source ranges = %v, want none", s.LoadBalancerSourceRanges)
		}
	})
	t.Run("the health check port is only for LoadBalancer services with external policy Local", func(t *testing.T) {
		withPort := func(s *globalv1.Service) { s.HealthCheckNodePort = 31000 }
		if got := v4(svc(svcType(globalv1.ServiceType_NODE_PORT), etpLocal, withPort)).HealthCheckNodePort; got != 0 {
			t.Errorf("NodePort: health check port %d, want 0", got)
		}
		if got := v4(svc(svcType(globalv1.ServiceType_LOAD_BALANCER), withPort)).HealthCheckNodePort; got != 0 {
			t.Errorf("LoadBalancer, Cluster policy: health check port %d, want 0", got)
		}
		if got := v4(svc(svcType(globalv1.ServiceType_LOAD_BALANCER), etpLocal, withPort)).HealthCheckNodePort; got != 31000 {
			t.Errorf("LoadBalancer, Local policy: health check port %d, want 31000", got)
		}
	})
	t.Run("external policy Local is only effective for externally accessible services", func(t *testing.T) {
		if got := v4(svc(etpLocal)).ExternalTrafficPolicy; got != localv1.TrafficPolicy_CLUSTER {
			t.Errorf("ClusterIP: %v", got)
		}
		if got := v4(svc(etpLocal, svcType(globalv1.ServiceType_NODE_PORT))).ExternalTrafficPolicy; got != localv1.TrafficPolicy_LOCAL {
			t.Errorf("NodePort: %v", got)
		}
	})
	t.Run("with AllowServiceExternalIPs off, external IPs get no rules but still make the service externally accessible", func(t *testing.T) {
		in := svc(externalIPs("192.0.2.1"), etpLocal, itpLocal)
		views := ServiceView(in, []*globalv1.EndpointSlice{slice("s1", ep("10.0.0.1"))}, Node{Name: "me"}, Options{NodeName: "me", ExternalIPsDisabled: true})
		if len(views) == 0 {
			t.Fatalf("no view")
		}
		s := views[0].Service
		if len(s.ExternalIps) != 0 {
			t.Errorf("external IPs = %v, want none", s.ExternalIps)
		}
		if s.ExternalTrafficPolicy != localv1.TrafficPolicy_LOCAL {
			t.Errorf("external policy %v, want LOCAL (the service is still externally accessible)", s.ExternalTrafficPolicy)
		}
		// Internal policy Local, but the port is externally accessible:
		// it uses the cluster set too, so the remote endpoint is in it.
		if eps := views[0].Endpoints; len(eps) != 1 || !eps[0].InClusterSet || !s.Ports[0].HasEndpoints {
			t.Errorf("endpoints %v, want 10.0.0.1 in the cluster set", eps)
		}
		if on := v4(in); !slices.Equal(on.ExternalIps, []string{"192.0.2.1"}) {
			t.Errorf("gate on (default): external IPs = %v", on.ExternalIps)
		}
	})
	t.Run("the view does not alias the input", func(t *testing.T) {
		in := svc(externalIPs("192.0.2.1"))
		s := v4(in)
		s.ExternalIps[0] = "changed"
		if in.ExternalIps[0] != "192.0.2.1" {
			t.Errorf("input modified through the view")
		}
		_ = proto.Clone(s)
	})
}
