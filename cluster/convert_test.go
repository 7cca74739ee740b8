package cluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/kpng/kpng/api/globalv1"
)

// Each case is a hand-written object in YAML, as a user puts it in a file
// (so without the fields the API server would have defaulted), and the
// cluster-model object, warnings and error it must give.

// fromYAML decodes a test object strictly, so that a typo in a case fails
// the test instead of silently testing an empty field.
func fromYAML[T any](t *testing.T, doc string) *T {
	t.Helper()
	out := new(T)
	if err := yaml.UnmarshalStrict([]byte(doc), out); err != nil {
		t.Fatalf("bad test object: %v\n%s", err, doc)
	}
	return out
}

// checkResult compares a conversion's output with the case's expectations:
// each wanted warning (or the error) must contain its string, which names the
// object and the field, and there must be no other warning.
func checkResult(t *testing.T, got, want proto.Message, warn Warnings, err error, wantWarn []string, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if len(warn) != len(wantWarn) {
		t.Errorf("warnings %q, want %d containing %q", warn, len(wantWarn), wantWarn)
	} else {
		for i := range warn {
			if !strings.Contains(warn[i], wantWarn[i]) {
				t.Errorf("warning %d is %q, want one containing %q", i, warn[i], wantWarn[i])
			}
		}
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("output differs (-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }

func TestServiceFromK8s(t *testing.T) {
	web := func(s *globalv1.Service) *globalv1.Service {
		s.Namespace, s.Name = "ns", "web"
		if s.Type == 0 {
			s.Type = globalv1.ServiceType_CLUSTER_IP
		}
		return s
	}
	tcp := func(port, target int32) *globalv1.ServicePort {
		return &globalv1.ServicePort{Protocol: globalv1.Protocol_TCP, Port: port, TargetPort: target}
	}
	for _, tc := range []struct {
		name     string
		in       string
		want     *globalv1.Service
		wantWarn []string
		wantErr  string
	}{{
		name: "a minimal hand-written service is of type ClusterIP, its port TCP, its targetPort the port",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, Ports: []*globalv1.ServicePort{tcp(80, 80)}}),
	}, {
		name: "targetPort 0 is the default: the port itself",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, ports: [{port: 80, targetPort: 0}]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, Ports: []*globalv1.ServicePort{tcp(80, 80)}}),
	}, {
		name: "a named targetPort is kept as a name, with no number",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, ports: [{name: http, port: 80, targetPort: web-http}]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, Ports: []*globalv1.ServicePort{
			{Name: "http", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPortName: "web-http"}}}),
	}, {
		name: "UDP and SCTP ports keep their protocol, TCP and UDP on one port number stay apart",
		in: `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, ports: [
			{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}, {name: s, port: 9, protocol: SCTP, nodePort: 30009}]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, Ports: []*globalv1.ServicePort{
			{Name: "dns", Protocol: globalv1.Protocol_UDP, Port: 53, TargetPort: 53},
			{Name: "dns-tcp", Protocol: globalv1.Protocol_TCP, Port: 53, TargetPort: 53},
			{Name: "s", Protocol: globalv1.Protocol_SCTP, Port: 9, TargetPort: 9, NodePort: 30009}}}),
	}, {
		name: "an invalid port is dropped with a warning naming spec.ports[i], the other ports kept",
		in: `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, ports: [
			{port: 80}, {port: 0}, {port: 65536}, {port: 81, protocol: ICMP}, {port: 82, nodePort: -1}, {port: 83, nodePort: 65536},
			{port: 84, targetPort: 65536}, {port: 85, targetPort: -1}, {port: 65535}]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, Ports: []*globalv1.ServicePort{tcp(80, 80), tcp(65535, 65535)}}),
		wantWarn: []string{
			"service ns/web: spec.ports[1] dropped: port 0 out of range",
			"service ns/web: spec.ports[2] dropped: port 65536 out of range",
			`service ns/web: spec.ports[3] dropped: unknown protocol "ICMP"`,
			"service ns/web: spec.ports[4] dropped: nodePort -1",
			"service ns/web: spec.ports[5] dropped: nodePort 65536",
			"service ns/web: spec.ports[6] dropped: targetPort 65536",
			"service ns/web: spec.ports[7] dropped: targetPort -1",
		},
	}, {
		name: "spec.clusterIP alone stands for spec.clusterIPs",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: "fd00::1"}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"fd00::1"}}),
	}, {
		name: "spec.clusterIPs wins over spec.clusterIP, primary family first (the families come from the IPs, not spec.ipFamilies)",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.9, clusterIPs: ["fd00::1", 10.0.0.1], ipFamilies: [IPv4]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"fd00::1", "10.0.0.1"}}),
	}, {
		name: "clusterIP None marks a headless service",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: None, ports: [{port: 80}]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"None"}, Ports: []*globalv1.ServicePort{tcp(80, 80)}}),
	}, {
		name:    "clusterIP None with another IP is an error naming spec.clusterIPs[0]",
		in:      `{metadata: {namespace: ns, name: web}, spec: {clusterIPs: [None, 10.0.0.1]}}`,
		wantErr: `service ns/web: spec.clusterIPs[0]: "None" is only valid alone`,
	}, {
		name:    "clusterIP None after an IP is an error naming spec.clusterIPs[1]",
		in:      `{metadata: {namespace: ns, name: web}, spec: {clusterIPs: [10.0.0.1, None]}}`,
		wantErr: `service ns/web: spec.clusterIPs[1]: "None" is only valid alone`,
	}, {
		name:    "an invalid cluster IP is an error (the service cannot be proxied) naming spec.clusterIPs[i]",
		in:      `{metadata: {namespace: ns, name: web}, spec: {clusterIPs: [10.0.0.1, "fd00::g"]}}`,
		wantErr: `service ns/web: spec.clusterIPs[1]: invalid IP address "fd00::g"`,
	}, {
		name:    "an invalid spec.clusterIP is an error naming spec.clusterIP, which is spec.clusterIPs[0]",
		in:      `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.256}}`,
		wantErr: `service ns/web: spec.clusterIP (as spec.clusterIPs[0]): invalid IP address "10.0.0.256"`,
	}, {
		name:    "an empty entry in clusterIPs is an error",
		in:      `{metadata: {namespace: ns, name: web}, spec: {clusterIPs: [10.0.0.1, ""]}}`,
		wantErr: `service ns/web: spec.clusterIPs[1]: invalid IP address ""`,
	}, {
		name:    "an IPv6 zone in a cluster IP is an error",
		in:      `{metadata: {namespace: ns, name: web}, spec: {clusterIP: "fe80::1%eth0"}}`,
		wantErr: `service ns/web: spec.clusterIP (as spec.clusterIPs[0]): invalid IP address "fe80::1%eth0": zones are not allowed`,
	}, {
		name: "IPv4 with leading zeros (stored before Kubernetes 1.20) is read as decimal, as kube-proxy's ParseIPSloppy does",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIPs: [010.096.000.010, "fd00::0010"], externalIPs: [0000192.0.2.1, "::ffff:010.0.2.2"]}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.96.0.10", "fd00::10"}, ExternalIps: []string{"192.0.2.1", "10.0.2.2"}}),
	}, {
		name: "an IPv4-mapped IPv6 address is its IPv4 address, as kube-proxy reads it",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: "::ffff:10.0.0.1"}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}}),
	}, {
		name: "an ExternalName service has no cluster IP",
		in:   `{metadata: {namespace: ns, name: web}, spec: {type: ExternalName, externalName: db.example.com}}`,
		want: web(&globalv1.Service{Type: globalv1.ServiceType_EXTERNAL_NAME}),
	}, {
		name: "NodePort keeps its node ports",
		in:   `{metadata: {namespace: ns, name: web}, spec: {type: NodePort, clusterIP: 10.0.0.1, ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}}`,
		want: web(&globalv1.Service{Type: globalv1.ServiceType_NODE_PORT, ClusterIps: []string{"10.0.0.1"},
			Ports: []*globalv1.ServicePort{{Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080, NodePort: 30080}}}),
	}, {
		name:    "an unknown type is an error naming spec.type",
		in:      `{metadata: {namespace: ns, name: web}, spec: {type: Magic, clusterIP: 10.0.0.1}}`,
		wantErr: `service ns/web: spec.type: unknown type "Magic"`,
	}, {
		name:    "a service without a name is an error",
		in:      `{metadata: {namespace: ns}, spec: {clusterIP: 10.0.0.1}}`,
		wantErr: "service: metadata.name is empty",
	}, {
		name:     "an invalid external IP is dropped with a warning naming spec.externalIPs[i]",
		in:       `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, externalIPs: [192.0.2.1, example.com, "2001:db8::1", "fe80::1%eth0"]}}`,
		want:     web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ExternalIps: []string{"192.0.2.1", "2001:db8::1"}}),
		wantWarn: []string{`service ns/web: spec.externalIPs[1] dropped: invalid IP address "example.com"`, "service ns/web: spec.externalIPs[3] dropped: invalid IP address \"fe80::1%eth0\": zones are not allowed"},
	}, {
		name: "load-balancer ingress: ipMode Proxy is marked, VIP and unset are not, hostname-only entries are skipped, an invalid IP is dropped with a warning",
		in: `{metadata: {namespace: ns, name: web}, spec: {type: LoadBalancer, clusterIP: 10.0.0.1},
			status: {loadBalancer: {ingress: [{ip: 198.51.100.1}, {ip: 198.51.100.2, ipMode: Proxy}, {ip: "2001:db8::2", ipMode: VIP}, {hostname: lb.example.com}, {ip: lb.example.com}, {ip: 198.051.100.3}]}}}`,
		want: web(&globalv1.Service{Type: globalv1.ServiceType_LOAD_BALANCER, ClusterIps: []string{"10.0.0.1"}, LoadBalancerIngress: []*globalv1.LoadBalancerIngress{
			{Ip: "198.51.100.1"}, {Ip: "198.51.100.2", IpModeProxy: true}, {Ip: "2001:db8::2"}, {Ip: "198.51.100.3"}}}),
		wantWarn: []string{`service ns/web: status.loadBalancer.ingress[4].ip dropped: invalid IP address "lb.example.com"`},
	}, {
		name: "an unknown ipMode is not captured, as kube-proxy captures only VIP or unset, with a warning",
		in: `{metadata: {namespace: ns, name: web}, spec: {type: LoadBalancer, clusterIP: 10.0.0.1},
			status: {loadBalancer: {ingress: [{ip: 198.51.100.1, ipMode: vip}, {ip: 198.51.100.2, ipMode: ""}]}}}`,
		want: web(&globalv1.Service{Type: globalv1.ServiceType_LOAD_BALANCER, ClusterIps: []string{"10.0.0.1"}, LoadBalancerIngress: []*globalv1.LoadBalancerIngress{
			{Ip: "198.51.100.1", IpModeProxy: true}, {Ip: "198.51.100.2", IpModeProxy: true}}}),
		wantWarn: []string{
			`service ns/web: status.loadBalancer.ingress[0].ipMode "vip" unknown, not capturing the IP`,
			`service ns/web: status.loadBalancer.ingress[1].ipMode "" unknown, not capturing the IP`,
		},
	}, {
		name: "loadBalancerSourceRanges are trimmed (validation lets spaces through) and masked, sloppy ones read as kube-proxy does, invalid ones dropped",
		in: `{metadata: {namespace: ns, name: web}, spec: {type: LoadBalancer, clusterIP: 10.0.0.1,
			loadBalancerSourceRanges: [" 203.0.113.7/24 ", "2001:db8::1/32", 10.0.0.0, 010.000.000.000/08, "::ffff:10.1.0.0/112", 10.0.0.0/33]}}`,
		want: web(&globalv1.Service{Type: globalv1.ServiceType_LOAD_BALANCER, ClusterIps: []string{"10.0.0.1"},
			LoadBalancerSourceRanges: []string{"203.0.113.0/24", "2001:db8::/32", "10.0.0.0/8", "10.1.0.0/16"}}),
		wantWarn: []string{
			`service ns/web: spec.loadBalancerSourceRanges[2] dropped: invalid CIDR "10.0.0.0"`,
			`service ns/web: spec.loadBalancerSourceRanges[5] dropped: invalid CIDR "10.0.0.0/33"`,
		},
	}, {
		name: "ClientIP affinity without sessionAffinityConfig gets the API server's 10800 seconds",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, sessionAffinity: ClientIP}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ClientIpAffinitySeconds: 10800}),
	}, {
		name: "ClientIP affinity with an empty clientIP config (nil timeout) gets 10800 seconds",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {}}}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ClientIpAffinitySeconds: 10800}),
	}, {
		name: "ClientIP affinity keeps its timeout, 1 to 86400",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 86400}}}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ClientIpAffinitySeconds: 86400}),
	}, {
		name:     "a ClientIP timeout out of range gets 10800 seconds and a warning",
		in:       `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 86401}}}}`,
		want:     web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ClientIpAffinitySeconds: 10800}),
		wantWarn: []string{"service ns/web: spec.sessionAffinityConfig.clientIP.timeoutSeconds 86401 out of range"},
	}, {
		name:     "a zero ClientIP timeout gets 10800 seconds and a warning",
		in:       `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}}}`,
		want:     web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ClientIpAffinitySeconds: 10800}),
		wantWarn: []string{"service ns/web: spec.sessionAffinityConfig.clientIP.timeoutSeconds 0 out of range"},
	}, {
		name: "affinity None ignores a timeout",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, sessionAffinity: None, sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}}),
	}, {
		name:     "an unknown sessionAffinity is None with a warning",
		in:       `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, sessionAffinity: Cookie}}`,
		want:     web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}}),
		wantWarn: []string{`service ns/web: spec.sessionAffinity "Cookie" unknown, using None`},
	}, {
		name: "unset traffic policies stay unspecified, which means Cluster",
		in:   `{metadata: {namespace: ns, name: web}, spec: {type: NodePort, clusterIP: 10.0.0.1}}`,
		want: web(&globalv1.Service{Type: globalv1.ServiceType_NODE_PORT, ClusterIps: []string{"10.0.0.1"}}),
	}, {
		name: "Local and Cluster traffic policies are kept",
		in:   `{metadata: {namespace: ns, name: web}, spec: {type: LoadBalancer, clusterIP: 10.0.0.1, externalTrafficPolicy: Local, internalTrafficPolicy: Cluster, healthCheckNodePort: 32000}}`,
		want: web(&globalv1.Service{Type: globalv1.ServiceType_LOAD_BALANCER, ClusterIps: []string{"10.0.0.1"},
			ExternalTrafficPolicy: globalv1.TrafficPolicy_LOCAL, InternalTrafficPolicy: globalv1.TrafficPolicy_CLUSTER, HealthCheckNodePort: 32000}),
	}, {
		name: "internalTrafficPolicy Local is kept",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, internalTrafficPolicy: Local, externalTrafficPolicy: Cluster}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ExternalTrafficPolicy: globalv1.TrafficPolicy_CLUSTER, InternalTrafficPolicy: globalv1.TrafficPolicy_LOCAL}),
	}, {
		name: "unknown traffic policies are Cluster with a warning naming the field",
		in:   `{metadata: {namespace: ns, name: web}, spec: {clusterIP: 10.0.0.1, internalTrafficPolicy: Nearest, externalTrafficPolicy: Global}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ExternalTrafficPolicy: globalv1.TrafficPolicy_CLUSTER, InternalTrafficPolicy: globalv1.TrafficPolicy_CLUSTER}),
		wantWarn: []string{
			`service ns/web: spec.externalTrafficPolicy "Global" unknown, using Cluster`,
			`service ns/web: spec.internalTrafficPolicy "Nearest" unknown, using Cluster`,
		},
	}, {
		name:     "a healthCheckNodePort out of range is dropped with a warning",
		in:       `{metadata: {namespace: ns, name: web}, spec: {type: LoadBalancer, clusterIP: 10.0.0.1, externalTrafficPolicy: Local, healthCheckNodePort: 65536}}`,
		want:     web(&globalv1.Service{Type: globalv1.ServiceType_LOAD_BALANCER, ClusterIps: []string{"10.0.0.1"}, ExternalTrafficPolicy: globalv1.TrafficPolicy_LOCAL}),
		wantWarn: []string{"service ns/web: spec.healthCheckNodePort 65536 dropped: out of range"},
	}, {
		name: "the service-proxy-name label is carried with its value",
		in:   `{metadata: {namespace: ns, name: web, labels: {service.kubernetes.io/service-proxy-name: other-proxy}}, spec: {clusterIP: 10.0.0.1}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ServiceProxyName: ptr("other-proxy")}),
	}, {
		name: "an empty service-proxy-name label is still present",
		in:   `{metadata: {namespace: ns, name: web, labels: {service.kubernetes.io/service-proxy-name: ""}}, spec: {clusterIP: 10.0.0.1}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}, ServiceProxyName: ptr("")}),
	}, {
		// kube-proxy filters the headless label on EndpointSlices only.
		name: "a Service's headless label and other labels are ignored",
		in:   `{metadata: {namespace: ns, name: web, labels: {service.kubernetes.io/headless: "", app: web}}, spec: {clusterIP: 10.0.0.1}}`,
		want: web(&globalv1.Service{ClusterIps: []string{"10.0.0.1"}}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, warn, err := ServiceFromK8s(fromYAML[corev1.Service](t, tc.in))
			checkResult(t, got, tc.want, warn, err, tc.wantWarn, tc.wantErr)
		})
	}
	t.Run("a nil service is an error", func(t *testing.T) {
		if out, _, err := ServiceFromK8s(nil); err == nil || out != nil {
			t.Fatalf("got %v, %v", out, err)
		}
	})
}

func TestEndpointSliceFromK8s(t *testing.T) {
	const meta = `metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}}`
	slice := func(typ globalv1.AddressType, s *globalv1.EndpointSlice) *globalv1.EndpointSlice {
		s.Namespace, s.Name, s.ServiceName, s.AddressType = "ns", "web-1", "web", typ
		return s
	}
	v4 := globalv1.AddressType_IPV4
	for _, tc := range []struct {
		name     string
		in       string
		want     *globalv1.EndpointSlice
		wantWarn []string
		wantErr  string
	}{{
		name: "unset conditions stay unset (ready and serving then mean true, terminating false)",
		in:   `{` + meta + `, addressType: IPv4, endpoints: [{addresses: [10.1.0.1]}, {addresses: [10.1.0.2], conditions: {}}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Endpoints: []*globalv1.Endpoint{{Addresses: []string{"10.1.0.1"}}, {Addresses: []string{"10.1.0.2"}}}}),
	}, {
		name: "set conditions are kept, false as false",
		in:   `{` + meta + `, addressType: IPv4, endpoints: [{addresses: [10.1.0.1], conditions: {ready: false, serving: true, terminating: true}}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Endpoints: []*globalv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}}}),
	}, {
		name: "a port with nil name, port and protocol: name unset, port 0 (both make kube-proxy ignore it), protocol TCP",
		in:   `{` + meta + `, addressType: IPv4, ports: [{}, {name: null, port: null, protocol: null}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Ports: []*globalv1.EndpointPort{{Protocol: globalv1.Protocol_TCP}, {Protocol: globalv1.Protocol_TCP}}}),
	}, {
		name: "an empty port name is set, unlike a nil one",
		in:   `{` + meta + `, addressType: IPv4, ports: [{name: "", port: 8080}, {name: dns, port: 53, protocol: UDP}, {name: s, port: 9, protocol: SCTP}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Ports: []*globalv1.EndpointPort{
			{Name: ptr(""), Protocol: globalv1.Protocol_TCP, Port: 8080},
			{Name: ptr("dns"), Protocol: globalv1.Protocol_UDP, Port: 53},
			{Name: ptr("s"), Protocol: globalv1.Protocol_SCTP, Port: 9}}}),
	}, {
		name: "an invalid port is dropped with a warning naming ports[i], the others kept",
		in:   `{` + meta + `, addressType: IPv4, ports: [{name: a, port: 70000}, {name: b, port: -1}, {name: c, protocol: ICMP, port: 1}, {name: d, port: 65535}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Ports: []*globalv1.EndpointPort{{Name: ptr("d"), Protocol: globalv1.Protocol_TCP, Port: 65535}}}),
		wantWarn: []string{
			"endpointslice ns/web-1: ports[0] dropped: port 70000 out of range",
			"endpointslice ns/web-1: ports[1] dropped: port -1 out of range",
			`endpointslice ns/web-1: ports[2] dropped: unknown protocol "ICMP"`,
		},
	}, {
		name: "an endpoint without addresses, or with an invalid one, is dropped with a warning naming endpoints[i]",
		in: `{` + meta + `, addressType: IPv4, endpoints: [{addresses: []}, {addresses: [10.1.0.1, 10.1.0.300]}, {addresses: [pod.example.com]},
			{addresses: ["fd00::1"]}, {addresses: ["10.1.0.4%eth0"]}, {addresses: [10.1.0.5]}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Endpoints: []*globalv1.Endpoint{{Addresses: []string{"10.1.0.5"}}}}),
		wantWarn: []string{
			"endpointslice ns/web-1: endpoints[0] dropped: no addresses",
			`endpointslice ns/web-1: endpoints[1] dropped: addresses[1]: invalid IP address "10.1.0.300"`,
			`endpointslice ns/web-1: endpoints[2] dropped: addresses[0]: invalid IP address "pod.example.com"`,
			`endpointslice ns/web-1: endpoints[3] dropped: addresses[0]: address "fd00::1" is not of type IPv4`,
			`endpointslice ns/web-1: endpoints[4] dropped: addresses[0]: invalid IP address "10.1.0.4%eth0"`,
		},
	}, {
		name:     "an IPv4 address in an IPv6 slice is dropped; IPv6 addresses are canonicalized",
		in:       `{` + meta + `, addressType: IPv6, endpoints: [{addresses: [10.1.0.1]}, {addresses: ["FD00:0:0::0001"]}, {addresses: ["fe80::1%eth0"]}]}`,
		want:     slice(globalv1.AddressType_IPV6, &globalv1.EndpointSlice{Endpoints: []*globalv1.Endpoint{{Addresses: []string{"fd00::1"}}}}),
		wantWarn: []string{`endpointslice ns/web-1: endpoints[0] dropped: addresses[0]: address "10.1.0.1" is not of type IPv6`, "endpoints[2] dropped: addresses[0]: invalid IP address \"fe80::1%eth0\": zones are not allowed"},
	}, {
		name: "sloppy IPv4 endpoint addresses are read as kube-proxy reads them",
		in:   `{` + meta + `, addressType: IPv4, endpoints: [{addresses: [010.001.000.007]}, {addresses: ["::ffff:10.1.0.8"]}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Endpoints: []*globalv1.Endpoint{{Addresses: []string{"10.1.0.7"}}, {Addresses: []string{"10.1.0.8"}}}}),
	}, {
		name: "an FQDN slice keeps its addresses as written (the brain skips it)",
		in:   `{` + meta + `, addressType: FQDN, endpoints: [{addresses: [pod.example.com]}]}`,
		want: slice(globalv1.AddressType_FQDN, &globalv1.EndpointSlice{Endpoints: []*globalv1.Endpoint{{Addresses: []string{"pod.example.com"}}}}),
	}, {
		name:    "an unknown addressType is an error naming addressType",
		in:      `{` + meta + `, addressType: IPv5}`,
		wantErr: `endpointslice ns/web-1: addressType: unknown type "IPv5"`,
	}, {
		name:    "a missing addressType is an error",
		in:      `{` + meta + `}`,
		wantErr: `endpointslice ns/web-1: addressType: unknown type ""`,
	}, {
		name:    "a slice without the service-name label belongs to no service: an error naming the label",
		in:      `{metadata: {namespace: ns, name: web-1, labels: {app: web}}, addressType: IPv4}`,
		wantErr: "endpointslice ns/web-1: no kubernetes.io/service-name label",
	}, {
		name:    "an empty service-name label is an error too",
		in:      `{metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: ""}}, addressType: IPv4}`,
		wantErr: "endpointslice ns/web-1: no kubernetes.io/service-name label",
	}, {
		name:    "a slice without a name is an error",
		in:      `{metadata: {namespace: ns, labels: {kubernetes.io/service-name: web}}, addressType: IPv4}`,
		wantErr: "endpointslice: metadata.name is empty",
	}, {
		name: "nodeName, zone and hints are kept; nil ones are empty",
		in: `{` + meta + `, addressType: IPv4, endpoints: [
			{addresses: [10.1.0.1], nodeName: node-1, zone: zone-a, hints: {forZones: [{name: zone-a}, {name: zone-b}], forNodes: [{name: node-1}]}},
			{addresses: [10.1.0.2], nodeName: null, zone: null, hints: null},
			{addresses: [10.1.0.3], hints: {forZones: [], forNodes: null}}]}`,
		want: slice(v4, &globalv1.EndpointSlice{Endpoints: []*globalv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, NodeName: "node-1", Zone: "zone-a", HintZones: []string{"zone-a", "zone-b"}, HintNodes: []string{"node-1"}},
			{Addresses: []string{"10.1.0.2"}},
			{Addresses: []string{"10.1.0.3"}}}}),
	}, {
		name: "the headless label is present even with an empty value",
		in:   `{metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web, service.kubernetes.io/headless: ""}}, addressType: IPv4}`,
		want: slice(v4, &globalv1.EndpointSlice{HeadlessLabel: true}),
	}, {
		name: "the last-change-trigger-time annotation is read with nanoseconds and its time zone",
		in:   `{metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}, annotations: {endpoints.kubernetes.io/last-change-trigger-time: "2024-05-01T12:00:00.123456789+02:00"}}, addressType: IPv4}`,
		want: slice(v4, &globalv1.EndpointSlice{TriggerTimeUnixNano: time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.UTC).UnixNano()}),
	}, {
		name: "the last-change-trigger-time annotation in whole seconds, as the controller writes it",
		in:   `{metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}, annotations: {endpoints.kubernetes.io/last-change-trigger-time: "2024-05-01T10:00:00Z"}}, addressType: IPv4}`,
		want: slice(v4, &globalv1.EndpointSlice{TriggerTimeUnixNano: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC).UnixNano()}),
	}, {
		name:     "a last-change-trigger-time that is not RFC 3339 is ignored with a warning naming the annotation",
		in:       `{metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}, annotations: {endpoints.kubernetes.io/last-change-trigger-time: "2024-05-01 10:00:00"}}, addressType: IPv4}`,
		want:     slice(v4, &globalv1.EndpointSlice{}),
		wantWarn: []string{"endpointslice ns/web-1: annotation endpoints.kubernetes.io/last-change-trigger-time ignored"},
	}, {
		name:     "a last-change-trigger-time that nanoseconds since 1970 cannot hold is ignored with a warning",
		in:       `{metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}, annotations: {endpoints.kubernetes.io/last-change-trigger-time: "9999-12-31T23:59:59Z"}}, addressType: IPv4}`,
		want:     slice(v4, &globalv1.EndpointSlice{}),
		wantWarn: []string{`endpointslice ns/web-1: annotation endpoints.kubernetes.io/last-change-trigger-time ignored: "9999-12-31T23:59:59Z" is out of range`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, warn, err := EndpointSliceFromK8s(fromYAML[discoveryv1.EndpointSlice](t, tc.in))
			checkResult(t, got, tc.want, warn, err, tc.wantWarn, tc.wantErr)
		})
	}
	t.Run("a nil slice is an error", func(t *testing.T) {
		if out, _, err := EndpointSliceFromK8s(nil); err == nil || out != nil {
			t.Fatalf("got %v, %v", out, err)
		}
	})
}

// A source may decode the next object into the struct it just converted;
// json then writes through the pointers already there. What was converted
// (and may be in the store) must not change.
func TestEndpointSliceFromK8sSharesNoMemoryWithItsInput(t *testing.T) {
	in := fromYAML[discoveryv1.EndpointSlice](t, `{metadata: {name: s, labels: {kubernetes.io/service-name: web}}, addressType: IPv4,
		ports: [{name: http, port: 80, protocol: TCP}], endpoints: [{addresses: [10.1.0.1], conditions: {ready: true, serving: true, terminating: false},
		nodeName: n1, zone: z1, hints: {forZones: [{name: z1}], forNodes: [{name: n1}]}}]}`)
	out, _, err := EndpointSliceFromK8s(in)
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(out)
	next := `{"metadata":{"name":"s2","labels":{"kubernetes.io/service-name":"other"}},"addressType":"IPv4",
		"ports":[{"name":"x","port":81,"protocol":"UDP"}],"endpoints":[{"addresses":["10.1.0.9"],"conditions":{"ready":false,"serving":false,"terminating":true},
		"nodeName":"n2","zone":"z2","hints":{"forZones":[{"name":"z2"}],"forNodes":[{"name":"n2"}]}}]}`
	if err := json.Unmarshal([]byte(next), in); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out, protocmp.Transform()); diff != "" {
		t.Fatalf("decoding into the input changed the output (-before +after):\n%s", diff)
	}
}

func TestNodeFromK8s(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       string
		want     *globalv1.Node
		wantWarn []string
		wantErr  string
	}{{
		name: "InternalIPs come before ExternalIPs whatever the status order, as kube-proxy picks the primary IP; other types are ignored",
		in: `{metadata: {name: n1}, status: {addresses: [{type: Hostname, address: n1}, {type: ExternalIP, address: 203.0.113.7},
			{type: InternalIP, address: 192.168.1.7}, {type: InternalDNS, address: n1.internal}, {type: ExternalIP, address: "2001:db8::7"}, {type: InternalIP, address: "fd00::7"}]}}`,
		want: &globalv1.Node{Name: "n1", Addresses: []string{"192.168.1.7", "fd00::7", "203.0.113.7", "2001:db8::7"}},
	}, {
		name:     "an invalid address is dropped with a warning naming status.addresses[i]; sloppy ones are read as kube-proxy reads them",
		in:       `{metadata: {name: n1}, status: {addresses: [{type: InternalIP, address: 192.168.001.007}, {type: InternalIP, address: n1.example.com}, {type: ExternalIP, address: ""}]}}`,
		want:     &globalv1.Node{Name: "n1", Addresses: []string{"192.168.1.7"}},
		wantWarn: []string{`node n1: status.addresses[1] dropped: invalid IP address "n1.example.com"`, `node n1: status.addresses[2] dropped: invalid IP address ""`},
	}, {
		name: "the zone comes from topology.kubernetes.io/zone only, not the deprecated failure-domain label",
		in:   `{metadata: {name: n1, labels: {topology.kubernetes.io/zone: zone-a, failure-domain.beta.kubernetes.io/zone: old}}}`,
		want: &globalv1.Node{Name: "n1", Zone: "zone-a"},
	}, {
		name: "a node without zone label has no zone",
		in:   `{metadata: {name: n1, labels: {failure-domain.beta.kubernetes.io/zone: old}}}`,
		want: &globalv1.Node{Name: "n1"},
	}, {
		name: "spec.podCIDR alone stands for spec.podCIDRs, masked",
		in:   `{metadata: {name: n1}, spec: {podCIDR: 10.244.1.1/24}}`,
		want: &globalv1.Node{Name: "n1", PodCidrs: []string{"10.244.1.0/24"}},
	}, {
		name: "spec.podCIDRs wins over spec.podCIDR, in order",
		in:   `{metadata: {name: n1}, spec: {podCIDR: 10.9.0.0/24, podCIDRs: ["fd00:10:244:1::/64", 10.244.1.0/24]}}`,
		want: &globalv1.Node{Name: "n1", PodCidrs: []string{"fd00:10:244:1::/64", "10.244.1.0/24"}},
	}, {
		name:     "an invalid pod CIDR is dropped with a warning naming the field; a sloppy one is read as kube-proxy does",
		in:       `{metadata: {name: n1}, spec: {podCIDRs: [10.244.1.0, 010.244.002.000/24]}}`,
		want:     &globalv1.Node{Name: "n1", PodCidrs: []string{"10.244.2.0/24"}},
		wantWarn: []string{`node n1: spec.podCIDRs[0] dropped: invalid CIDR "10.244.1.0"`},
	}, {
		name:     "an invalid spec.podCIDR is named as spec.podCIDR",
		in:       `{metadata: {name: n1}, spec: {podCIDR: 10.244.1.0/40}}`,
		want:     &globalv1.Node{Name: "n1"},
		wantWarn: []string{`node n1: spec.podCIDR (as spec.podCIDRs[0]) dropped: invalid CIDR "10.244.1.0/40"`},
	}, {
		name:    "a node without a name is an error",
		in:      `{metadata: {labels: {a: b}}}`,
		wantErr: "node: metadata.name is empty",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, warn, err := NodeFromK8s(fromYAML[corev1.Node](t, tc.in))
			checkResult(t, got, tc.want, warn, err, tc.wantWarn, tc.wantErr)
		})
	}
	t.Run("a nil node is an error", func(t *testing.T) {
		if out, _, err := NodeFromK8s(nil); err == nil || out != nil {
			t.Fatalf("got %v, %v", out, err)
		}
	})
}

func TestServiceCIDRFromK8s(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       string
		want     *globalv1.ServiceCIDR
		wantWarn []string
		wantErr  string
	}{{
		name: "CIDRs are kept in order, masked and canonical",
		in:   `{metadata: {name: kubernetes}, spec: {cidrs: [10.96.0.1/12, "FD00:10:96::/112"]}}`,
		want: &globalv1.ServiceCIDR{Name: "kubernetes", Cidrs: []string{"10.96.0.0/12", "fd00:10:96::/112"}},
	}, {
		name:     "an invalid CIDR is dropped with a warning naming spec.cidrs[i]; an IPv4-mapped one is its IPv4 range",
		in:       `{metadata: {name: extra}, spec: {cidrs: [10.96.0.0/12, "fd00::/129", "::ffff:10.100.0.0/112", ""]}}`,
		want:     &globalv1.ServiceCIDR{Name: "extra", Cidrs: []string{"10.96.0.0/12", "10.100.0.0/16"}},
		wantWarn: []string{`servicecidr extra: spec.cidrs[1] dropped: invalid CIDR "fd00::/129"`, `servicecidr extra: spec.cidrs[3] dropped: invalid CIDR ""`},
	}, {
		name: "a ServiceCIDR without CIDRs is kept empty",
		in:   `{metadata: {name: empty}}`,
		want: &globalv1.ServiceCIDR{Name: "empty"},
	}, {
		name:    "a ServiceCIDR without a name is an error",
		in:      `{spec: {cidrs: [10.96.0.0/12]}}`,
		wantErr: "servicecidr: metadata.name is empty",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, warn, err := ServiceCIDRFromK8s(fromYAML[networkingv1.ServiceCIDR](t, tc.in))
			checkResult(t, got, tc.want, warn, err, tc.wantWarn, tc.wantErr)
		})
	}
	t.Run("a nil ServiceCIDR is an error", func(t *testing.T) {
		if out, _, err := ServiceCIDRFromK8s(nil); err == nil || out != nil {
			t.Fatalf("got %v, %v", out, err)
		}
	})
}

// The sloppy readings above are kube-proxy's; these pin a few of them by
// value (FuzzParseIP and FuzzParseCIDR compare with upstream at large).
func TestParseIPAndCIDRLikeKubeProxy(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":         "10.0.0.1",
		"010.000.000.001":  "10.0.0.1",
		"0000000010.0.0.1": "10.0.0.1",
		"::ffff:1.2.3.4":   "1.2.3.4",
		"::ffff:01.2.3.4":  "1.2.3.4",
		"::1.2.3.4":        "::102:304",
		"00001::0":         "1::",
		"FD00::0001":       "fd00::1",
		"1.2.3.256":        "error",
		"1.2.3":            "error",
		"1.2.3.4.5":        "error",
		"0x1.2.3.4":        "error",
		"+1.2.3.4":         "error",
		" 1.2.3.4":         "error",
		"1::2::3":          "error",
		"100000::":         "error",
		"fe80::1%eth0":     "error",
		"":                 "error",
	} {
		got, err := parseIP(in)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("parseIP(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"10.1.2.3/8":          "10.0.0.0/8",
		"010.0.0.0/008":       "10.0.0.0/8",
		"::ffff:10.1.0.0/104": "10.0.0.0/8",
		"::ffff:0.0.0.0/96":   "0.0.0.0/0",
		"::ffff:10.0.0.0/95":  "::fffe:0:0/95",
		"fd00::1/64":          "fd00::/64",
		"10.0.0.0/33":         "error",
		"fd00::/129":          "error",
		"10.0.0.0/":           "error",
		"10.0.0.0/+8":         "error",
		"10.0.0.0/8/8":        "error",
		"/8":                  "error",
		"fe80::/10%eth0":      "error",
		"fe80::%eth0/10":      "error",
	} {
		got, err := parseCIDR(in)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("parseCIDR(%q) = %q, want %q", in, got, want)
		}
	}
}
