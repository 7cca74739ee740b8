package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	netutils "k8s.io/utils/net"

	"github.com/kpng/kpng/api/globalv1"
)

// The fuzz tests feed arbitrary JSON to each converter, the way a file or a
// misbehaving API server would, and check that conversion never panics and
// that whatever it accepts is something every consumer can use without
// checking again: canonical IPs and CIDRs, ports in range, no nil elements,
// a deterministic result, and the input left untouched.

// fuzzConvert is the common body: decode data into a fresh *T, convert it
// twice, and check the invariants shared by every kind plus the kind's own.
func fuzzConvert[T any, O proto.Message](t *testing.T, data []byte, kind string, conv func(*T) (O, Warnings, error), check func(t *testing.T, in *T, out O)) {
	in := new(T)
	if json.Unmarshal(data, in) != nil {
		return
	}
	before, err := json.Marshal(in)
	if err != nil {
		return // e.g. a value json accepts but cannot write back; not ours to judge
	}
	out, warn, err := conv(in)
	after, _ := json.Marshal(in)
	if string(before) != string(after) {
		t.Fatalf("conversion modified its input:\nbefore %s\nafter  %s", before, after)
	}
	if err != nil {
		if !reflect.ValueOf(out).IsNil() || warn != nil {
			t.Fatalf("error %v came with output %v and warnings %q", err, out, warn)
		}
		if !strings.HasPrefix(err.Error(), kind+":") && !strings.HasPrefix(err.Error(), kind+" ") {
			t.Fatalf("error %q does not name the %s", err, kind)
		}
		return
	}
	if reflect.ValueOf(out).IsNil() {
		t.Fatal("no error and no output")
	}
	for _, w := range warn {
		if !strings.HasPrefix(w, kind+" ") {
			t.Fatalf("warning %q does not name the %s", w, kind)
		}
	}
	if _, err := proto.Marshal(out); err != nil {
		t.Fatalf("output does not marshal (it could not cross gRPC): %v\n%v", err, out)
	}
	out2, warn2, err2 := conv(in)
	if err2 != nil || !proto.Equal(out, out2) || !reflect.DeepEqual(warn, warn2) {
		t.Fatalf("converting twice differs:\n%v %q %v\n%v %q %v", out, warn, err, out2, warn2, err2)
	}
	checkNoNilElements(t, out.ProtoReflect().Interface())
	check(t, in, out)
}

// checkNoNilElements fails when a repeated message field holds a nil.
func checkNoNilElements(t *testing.T, m proto.Message) {
	t.Helper()
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Pointer {
			continue
		}
		for j := 0; j < f.Len(); j++ {
			if f.Index(j).IsNil() {
				t.Fatalf("%s.%s[%d] is nil", v.Type().Name(), v.Type().Field(i).Name, j)
			}
			if sub, ok := f.Index(j).Interface().(proto.Message); ok {
				checkNoNilElements(t, sub)
			}
		}
	}
}

// checkIP fails unless s is an IP address in canonical form without a zone:
// what the brain and the backends compare and program as is.
func checkIP(t *testing.T, field, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.String() != s || a.Is4In6() {
		t.Fatalf("%s: %q is not a canonical IP address", field, s)
	}
	return a
}

// checkCIDR fails unless s is a masked prefix in canonical form.
func checkCIDR(t *testing.T, field, s string) {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Masked() != p || p.String() != s || p.Addr().Is4In6() {
		t.Fatalf("%s: %q is not a canonical CIDR", field, s)
	}
}

func checkPort(t *testing.T, field string, p, min int32) {
	t.Helper()
	if p < min || p > 65535 {
		t.Fatalf("%s: %d out of range %d-65535", field, p, min)
	}
}

func checkServiceOut(t *testing.T, in *corev1.Service, out *globalv1.Service) {
	if out.Namespace != in.Namespace || out.Name != in.Name {
		t.Fatalf("key %s/%s, want %s/%s", out.Namespace, out.Name, in.Namespace, in.Name)
	}
	if out.Type == globalv1.ServiceType_SERVICE_TYPE_UNSPECIFIED {
		t.Fatal("type left unspecified")
	}
	for i, ip := range out.ClusterIps {
		if ip == corev1.ClusterIPNone && i == 0 && len(out.ClusterIps) == 1 {
			continue
		}
		checkIP(t, fmt.Sprintf("clusterIps[%d]", i), ip)
	}
	for i, ip := range out.ExternalIps {
		checkIP(t, fmt.Sprintf("externalIps[%d]", i), ip)
	}
	for i, ing := range out.LoadBalancerIngress {
		checkIP(t, fmt.Sprintf("loadBalancerIngress[%d]", i), ing.Ip)
	}
	for i, r := range out.LoadBalancerSourceRanges {
		checkCIDR(t, fmt.Sprintf("loadBalancerSourceRanges[%d]", i), r)
	}
	for i, p := range out.Ports {
		checkPort(t, fmt.Sprintf("ports[%d].port", i), p.Port, 1)
		checkPort(t, fmt.Sprintf("ports[%d].nodePort", i), p.NodePort, 0)
		if p.TargetPortName == "" {
			checkPort(t, fmt.Sprintf("ports[%d].targetPort", i), p.TargetPort, 1)
		} else if p.TargetPort != 0 {
			t.Fatalf("ports[%d] has both targetPort %d and targetPortName %q", i, p.TargetPort, p.TargetPortName)
		}
		if p.Protocol == globalv1.Protocol_PROTOCOL_UNSPECIFIED {
			t.Fatalf("ports[%d].protocol left unspecified", i)
		}
	}
	if a := out.ClientIpAffinitySeconds; a < 0 || a > maxAffinitySeconds {
		t.Fatalf("clientIpAffinitySeconds %d out of range", a)
	}
	checkPort(t, "healthCheckNodePort", out.HealthCheckNodePort, 0)
}

func checkEndpointSliceOut(t *testing.T, in *discoveryv1.EndpointSlice, out *globalv1.EndpointSlice) {
	if out.Namespace != in.Namespace || out.Name != in.Name || out.ServiceName == "" {
		t.Fatalf("key %s/%s of service %q, want %s/%s", out.Namespace, out.Name, out.ServiceName, in.Namespace, in.Name)
	}
	for i, p := range out.Ports {
		checkPort(t, fmt.Sprintf("ports[%d].port", i), p.Port, 0)
		if p.Protocol == globalv1.Protocol_PROTOCOL_UNSPECIFIED {
			t.Fatalf("ports[%d].protocol left unspecified", i)
		}
	}
	for i, e := range out.Endpoints {
		if len(e.Addresses) == 0 {
			t.Fatalf("endpoints[%d] has no address", i)
		}
		if out.AddressType == globalv1.AddressType_FQDN {
			continue
		}
		for j, a := range e.Addresses {
			ip := checkIP(t, fmt.Sprintf("endpoints[%d].addresses[%d]", i, j), a)
			if ip.Is6() != (out.AddressType == globalv1.AddressType_IPV6) {
				t.Fatalf("endpoints[%d].addresses[%d]: %s in a slice of type %v", i, j, a, out.AddressType)
			}
		}
	}
	if ns := out.TriggerTimeUnixNano; ns != 0 {
		want, err := time.Parse(time.RFC3339Nano, in.Annotations[AnnotationTriggerTime])
		if err != nil || !time.Unix(0, ns).Equal(want) {
			t.Fatalf("trigger time %d (%v) is not the annotation's %q", ns, time.Unix(0, ns).UTC(), in.Annotations[AnnotationTriggerTime])
		}
	}
}

func checkNodeOut(t *testing.T, in *corev1.Node, out *globalv1.Node) {
	if out.Name != in.Name {
		t.Fatalf("name %q, want %q", out.Name, in.Name)
	}
	for i, a := range out.Addresses {
		checkIP(t, fmt.Sprintf("addresses[%d]", i), a)
	}
	for i, c := range out.PodCidrs {
		checkCIDR(t, fmt.Sprintf("podCidrs[%d]", i), c)
	}
}

func checkServiceCIDROut(t *testing.T, in *networkingv1.ServiceCIDR, out *globalv1.ServiceCIDR) {
	if out.Name != in.Name {
		t.Fatalf("name %q, want %q", out.Name, in.Name)
	}
	for i, c := range out.Cidrs {
		checkCIDR(t, fmt.Sprintf("cidrs[%d]", i), c)
	}
}

func FuzzServiceFromK8s(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"name":"web","namespace":"default"},"spec":{"type":"ClusterIP","clusterIP":"10.96.0.10","clusterIPs":["10.96.0.10"],"ipFamilies":["IPv4"],"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080}],"sessionAffinity":"None","internalTrafficPolicy":"Cluster"}}`,
		`{"metadata":{"name":"lb","namespace":"prod","labels":{"service.kubernetes.io/service-proxy-name":"other"}},"spec":{"type":"LoadBalancer","clusterIPs":["10.96.0.11","fd00:10:96::11"],"ports":[{"name":"https","port":443,"targetPort":"https","nodePort":30443},{"name":"dns","protocol":"UDP","port":53}],"externalTrafficPolicy":"Local","healthCheckNodePort":31000,"externalIPs":["192.0.2.10","2001:db8::10"],"loadBalancerSourceRanges":[" 203.0.113.0/24","2001:db8::/32"],"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":600}}},"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.1"},{"ip":"198.51.100.2","ipMode":"Proxy"},{"hostname":"lb.example.com"}]}}}`,
		`{"metadata":{"name":"headless"},"spec":{"clusterIP":"None","ports":[{"port":5432}]},"metadata2":{}}`,
		`{"metadata":{"name":"ext"},"spec":{"type":"ExternalName","externalName":"db.example.com"}}`,
		`{"metadata":{"name":"legacy"},"spec":{"clusterIP":"010.096.000.010","externalIPs":["0192.0.2.1","::ffff:192.0.2.2"],"ports":[{"port":65535,"targetPort":0},{"port":0},{"port":1,"protocol":"ICMP"}]}}`,
		`{"metadata":{"name":"bad"},"spec":{"clusterIPs":["10.0.0.1","None"],"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":-1}},"healthCheckNodePort":70000}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzConvert(t, data, "service", ServiceFromK8s, checkServiceOut)
	})
}

func FuzzEndpointSliceFromK8s(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"name":"web-abc12","namespace":"default","labels":{"kubernetes.io/service-name":"web","endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io"},"annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"2024-05-01T10:00:00Z"}},"addressType":"IPv4","ports":[{"name":"http","protocol":"TCP","port":8080}],"endpoints":[{"addresses":["10.244.1.5"],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":"node-1","zone":"zone-a","hints":{"forZones":[{"name":"zone-a"}],"forNodes":[{"name":"node-1"}]}},{"addresses":["10.244.2.7"],"conditions":{"ready":false,"serving":true,"terminating":true},"nodeName":"node-2","zone":"zone-b"}]}`,
		`{"metadata":{"name":"web-v6","namespace":"default","labels":{"kubernetes.io/service-name":"web"},"annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"2024-05-01T10:00:00.123456789+02:00"}},"addressType":"IPv6","ports":[{"name":"","port":8080},{"port":null,"name":null,"protocol":null}],"endpoints":[{"addresses":["fd00:10:244::5"],"conditions":{}},{"addresses":["10.0.0.1"]},{"addresses":[]}]}`,
		`{"metadata":{"name":"h","labels":{"kubernetes.io/service-name":"h","service.kubernetes.io/headless":""},"annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"yesterday"}},"addressType":"FQDN","endpoints":[{"addresses":["pod.example.com"]}]}`,
		`{"metadata":{"name":"odd","labels":{"kubernetes.io/service-name":"x"},"annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"9999-12-31T23:59:59Z"}},"addressType":"IPv4","ports":[{"name":"p","protocol":"SCTP","port":70000},{"name":"q","protocol":"XTP","port":1}],"endpoints":[{"addresses":["010.001.002.003","fe80::1%eth0"],"nodeName":"","zone":"","hints":{}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzConvert(t, data, "endpointslice", EndpointSliceFromK8s, checkEndpointSliceOut)
	})
}

func FuzzNodeFromK8s(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"name":"node-1","labels":{"topology.kubernetes.io/zone":"zone-a","kubernetes.io/hostname":"node-1"}},"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24","fd00:10:244:1::/64"]},"status":{"addresses":[{"type":"Hostname","address":"node-1"},{"type":"ExternalIP","address":"203.0.113.7"},{"type":"InternalIP","address":"192.168.1.7"},{"type":"InternalIP","address":"fd00::7"}]}}`,
		`{"metadata":{"name":"old"},"spec":{"podCIDR":"010.244.001.000/24"},"status":{"addresses":[{"type":"InternalIP","address":"192.168.001.007"},{"type":"InternalIP","address":"not-an-ip"}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzConvert(t, data, "node", NodeFromK8s, checkNodeOut)
	})
}

func FuzzServiceCIDRFromK8s(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"name":"kubernetes"},"spec":{"cidrs":["10.96.0.0/16","fd00:10:96::/112"]}}`,
		`{"metadata":{"name":"odd"},"spec":{"cidrs":["10.96.0.1/16","010.097.000.000/16","::ffff:10.0.0.0/104","x"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzConvert(t, data, "servicecidr", ServiceCIDRFromK8s, checkServiceCIDROut)
	})
}

// FuzzParseIP holds parseIP to upstream's reading of addresses
// (k8s.io/utils/net.ParseIPSloppy, what kube-proxy uses): the same strings
// accepted, the same address out. Objects stored before Kubernetes 1.20 may
// carry IPv4 octets with leading zeros, and kube-proxy still proxies them.
func FuzzParseIP(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "010.001.002.003", "0000010.1.2.3", "1.2.3.256", "1.2.3", "1.2.3.4.5", "::1", "fd00::0001",
		"::ffff:1.2.3.4", "::ffff:010.1.2.3", "::1.2.3.4", "fe80::1%eth0", "1.2.3.4%eth0", "", " 1.2.3.4", "00001::", "1::2::3", "0x1.2.3.4", "1.2.3.-4", "+1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseIP(s)
		want := netutils.ParseIPSloppy(s)
		switch {
		case want == nil && err == nil:
			t.Fatalf("parseIP(%q) = %q, upstream rejects it", s, got)
		case want != nil && err != nil:
			t.Fatalf("parseIP(%q): %v, upstream reads %s", s, err, want)
		case want != nil && got != want.String():
			t.Fatalf("parseIP(%q) = %q, upstream reads %s", s, got, want)
		}
	})
}

// FuzzParseCIDR holds parseCIDR to k8s.io/utils/net.ParseCIDRSloppy, which
// kube-proxy uses for loadBalancerSourceRanges and node pod CIDRs.
func FuzzParseCIDR(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.1.2.3/8", "010.000.000.000/08", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0", "/8", "fd00::/64", "fd00::1/128",
		"::ffff:10.0.0.0/104", "::ffff:10.0.0.0/95", "::ffff:0.0.0.0/96", "fe80::/10%eth0", "10.0.0.0/+8", "10.0.0.0/-1", "10.0.0.0/8/8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseCIDR(s)
		_, want, werr := netutils.ParseCIDRSloppy(s)
		switch {
		case werr != nil && err == nil:
			t.Fatalf("parseCIDR(%q) = %q, upstream rejects it: %v", s, got, werr)
		case werr == nil && err != nil:
			t.Fatalf("parseCIDR(%q): %v, upstream reads %s", s, err, want)
		case werr == nil && got != want.String():
			t.Fatalf("parseCIDR(%q) = %q, upstream reads %s", s, got, want)
		}
	})
}

// The JSON fuzz tests above spend most of their time on bytes that are not
// JSON. These build the object from values the fuzzer picks directly, so
// that it explores field values (addresses, ports, protocols, policies,
// nil pointers) instead of syntax; the checks are the same.

// optional maps a fuzzer byte to an unset pointer (0) or to v.
func optional[T any](b byte, v T) *T {
	if b%2 == 0 {
		return nil
	}
	return &v
}

func FuzzServiceFields(f *testing.F) {
	f.Add("LoadBalancer", "10.0.0.1", "fd00::1", "192.0.2.1", "Proxy", " 10.0.0.0/8", int32(80), int32(30080), int32(8080), "", "TCP", "ClientIP", int32(60), "Local", "Cluster", int32(31000), byte(3))
	f.Add("", "010.0.0.1", "", "::ffff:1.2.3.4", "VIP", "010.0.0.0/08", int32(0), int32(-1), int32(0), "http", "UDP", "", int32(0), "", "", int32(0), byte(0))
	f.Fuzz(func(t *testing.T, typ, ip1, ip2, ext, ipMode, srcRange string, port, nodePort, targetPort int32, targetName, protocol, affinity string, timeout int32, etp, itp string, hc int32, flags byte) {
		svc := corev1.Service{}
		svc.Namespace, svc.Name = "ns", "s"
		svc.Spec.Type = corev1.ServiceType(typ)
		if flags&1 != 0 {
			svc.Spec.ClusterIP = ip1
		} else {
			svc.Spec.ClusterIPs = []string{ip1, ip2}[:1+int(flags>>1&1)]
		}
		svc.Spec.ExternalIPs = []string{ext}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ext, IPMode: optional(flags>>2, corev1.LoadBalancerIPMode(ipMode))}}
		svc.Spec.LoadBalancerSourceRanges = []string{srcRange}
		tp := intstr.FromInt32(targetPort)
		if targetName != "" {
			tp = intstr.FromString(targetName)
		}
		svc.Spec.Ports = []corev1.ServicePort{{Port: port, NodePort: nodePort, TargetPort: tp, Protocol: corev1.Protocol(protocol)}, {Port: 1}}
		svc.Spec.SessionAffinity = corev1.ServiceAffinity(affinity)
		if flags>>3&1 != 0 {
			svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: optional(flags>>4, timeout)}}
		}
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(etp)
		svc.Spec.InternalTrafficPolicy = optional(flags>>5, corev1.ServiceInternalTrafficPolicy(itp))
		svc.Spec.HealthCheckNodePort = hc
		data, err := json.Marshal(&svc)
		if err != nil {
			t.Fatal(err)
		}
		fuzzConvert(t, data, "service", ServiceFromK8s, checkServiceOut)
	})
}

func FuzzEndpointSliceFields(f *testing.F) {
	f.Add("IPv4", "10.0.0.1", "010.0.0.2", "http", int32(8080), "TCP", "node-1", "zone-a", "2024-05-01T10:00:00Z", byte(0xff), byte(0x15))
	f.Add("IPv6", "fd00::1", "10.0.0.1", "", int32(0), "SCTP", "", "", "9999-12-31T23:59:59Z", byte(0), byte(0))
	f.Fuzz(func(t *testing.T, addrType, addr1, addr2, portName string, port int32, protocol, node, zone, trigger string, ptrs, conds byte) {
		sl := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressType(addrType)}
		sl.Namespace, sl.Name = "ns", "s-1"
		sl.Labels = map[string]string{LabelServiceName: "s"}
		if ptrs&1 != 0 {
			sl.Annotations = map[string]string{AnnotationTriggerTime: trigger}
		}
		sl.Ports = []discoveryv1.EndpointPort{{Name: optional(ptrs>>1, portName), Port: optional(ptrs>>2, port), Protocol: optional(ptrs>>3, corev1.Protocol(protocol))}}
		ep := discoveryv1.Endpoint{
			Addresses: []string{addr1, addr2}[:1+int(ptrs>>4&1)],
			Conditions: discoveryv1.EndpointConditions{
				Ready: optional(conds, conds&2 != 0), Serving: optional(conds>>2, conds&8 != 0), Terminating: optional(conds>>4, conds&32 != 0)},
			NodeName: optional(ptrs>>5, node),
			Zone:     optional(ptrs>>6, zone),
		}
		if ptrs>>7 != 0 {
			ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}, ForNodes: []discoveryv1.ForNode{{Name: node}}}
		}
		sl.Endpoints = []discoveryv1.Endpoint{ep, {Addresses: []string{addr2}}}
		data, err := json.Marshal(&sl)
		if err != nil {
			t.Fatal(err)
		}
		fuzzConvert(t, data, "endpointslice", EndpointSliceFromK8s, checkEndpointSliceOut)
	})
}

func FuzzNodeFields(f *testing.F) {
	f.Add("ExternalIP", "203.0.113.1", "InternalIP", "192.168.001.1", "10.244.0.0/24", "fd00::/64", "zone-a", false)
	f.Fuzz(func(t *testing.T, type1, addr1, type2, addr2, cidr1, cidr2, zone string, single bool) {
		n := corev1.Node{}
		n.Name = "n"
		n.Labels = map[string]string{LabelTopologyZone: zone}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeAddressType(type1), Address: addr1}, {Type: corev1.NodeAddressType(type2), Address: addr2}}
		if single {
			n.Spec.PodCIDR = cidr1
		} else {
			n.Spec.PodCIDRs = []string{cidr1, cidr2}
		}
		data, err := json.Marshal(&n)
		if err != nil {
			t.Fatal(err)
		}
		fuzzConvert(t, data, "node", NodeFromK8s, checkNodeOut)
	})
}
