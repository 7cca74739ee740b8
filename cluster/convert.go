package cluster

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/kpng/kpng/api/globalv1"
)

// Labels and annotations that proxying reads.
const (
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	LabelHeadless         = "service.kubernetes.io/headless"
	LabelServiceName      = "kubernetes.io/service-name"
	LabelTopologyZone     = "topology.kubernetes.io/zone"
	AnnotationTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"

	// defaultAffinitySeconds is the API server's default ClientIP affinity
	// timeout, used when a Service (typically hand-written) omits it.
	defaultAffinitySeconds = 10800
	maxAffinitySeconds     = 86400
)

// Warnings collects the problems found while converting an object that did
// not stop the conversion: the offending field was dropped and the rest kept.
type Warnings []string

func (w *Warnings) add(format string, args ...any) {
	*w = append(*w, fmt.Sprintf(format, args...))
}

// ServiceFromK8s converts a v1 Service into the cluster model, applying the
// API server's defaults where a hand-written object leaves fields out. An
// error means the object cannot be used at all; warnings name fields that
// were invalid and dropped.
func ServiceFromK8s(in *corev1.Service) (*globalv1.Service, Warnings, error) {
	if in == nil {
		return nil, nil, fmt.Errorf("service: nil object")
	}
	if in.Name == "" {
		return nil, nil, fmt.Errorf("service: metadata.name is empty")
	}
	var warn Warnings
	out := &globalv1.Service{
		Namespace: in.Namespace,
		Name:      in.Name,
	}
	switch in.Spec.Type {
	case "", corev1.ServiceTypeClusterIP:
		out.Type = globalv1.ServiceType_CLUSTER_IP
	case corev1.ServiceTypeNodePort:
		out.Type = globalv1.ServiceType_NODE_PORT
	case corev1.ServiceTypeLoadBalancer:
		out.Type = globalv1.ServiceType_LOAD_BALANCER
	case corev1.ServiceTypeExternalName:
		out.Type = globalv1.ServiceType_EXTERNAL_NAME
	default:
		return nil, nil, fmt.Errorf("service %s/%s: spec.type: unknown type %q", in.Namespace, in.Name, in.Spec.Type)
	}

	clusterIPs := in.Spec.ClusterIPs
	field := func(i int) string { return fmt.Sprintf("spec.clusterIPs[%d]", i) }
	if len(clusterIPs) == 0 && in.Spec.ClusterIP != "" {
		clusterIPs = []string{in.Spec.ClusterIP}
		field = func(int) string { return "spec.clusterIP (as spec.clusterIPs[0])" }
	}
	for i, ip := range clusterIPs {
		if ip == corev1.ClusterIPNone {
			if len(clusterIPs) != 1 {
				return nil, nil, fmt.Errorf("service %s/%s: %s: %q is only valid alone", in.Namespace, in.Name, field(i), ip)
			}
			out.ClusterIps = append(out.ClusterIps, ip)
			continue
		}
		addr, err := parseIP(ip)
		if err != nil {
			return nil, nil, fmt.Errorf("service %s/%s: %s: %w", in.Namespace, in.Name, field(i), err)
		}
		out.ClusterIps = append(out.ClusterIps, addr)
	}

	for i, ip := range in.Spec.ExternalIPs {
		addr, err := parseIP(ip)
		if err != nil {
			warn.add("service %s/%s: spec.externalIPs[%d] dropped: %v", in.Namespace, in.Name, i, err)
			continue
		}
		out.ExternalIps = append(out.ExternalIps, addr)
	}
	for i, ing := range in.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // hostname-only ingress: nothing to capture
		}
		addr, err := parseIP(ing.IP)
		if err != nil {
			warn.add("service %s/%s: status.loadBalancer.ingress[%d].ip dropped: %v", in.Namespace, in.Name, i, err)
			continue
		}
		// As kube-proxy (IsVIPMode): only an unset ipMode or VIP makes the
		// node capture the IP; any other mode leaves it to the load balancer.
		proxyMode := ing.IPMode != nil && *ing.IPMode != corev1.LoadBalancerIPModeVIP
		if proxyMode && *ing.IPMode != corev1.LoadBalancerIPModeProxy {
			warn.add("service %s/%s: status.loadBalancer.ingress[%d].ipMode %q unknown, not capturing the IP", in.Namespace, in.Name, i, *ing.IPMode)
		}
		out.LoadBalancerIngress = append(out.LoadBalancerIngress, &globalv1.LoadBalancerIngress{
			Ip:          addr,
			IpModeProxy: proxyMode,
		})
	}
	for i, r := range in.Spec.LoadBalancerSourceRanges {
		// The API server's validation lets whitespace through; kube-proxy trims it.
		prefix, err := parseCIDR(strings.TrimSpace(r))
		if err != nil {
			warn.add("service %s/%s: spec.loadBalancerSourceRanges[%d] dropped: %v", in.Namespace, in.Name, i, err)
			continue
		}
		out.LoadBalancerSourceRanges = append(out.LoadBalancerSourceRanges, prefix)
	}

	for i := range in.Spec.Ports {
		p, err := servicePortFromK8s(&in.Spec.Ports[i])
		if err != nil {
			warn.add("service %s/%s: spec.ports[%d] dropped: %v", in.Namespace, in.Name, i, err)
			continue
		}
		out.Ports = append(out.Ports, p)
	}

	if in.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.ClientIpAffinitySeconds = defaultAffinitySeconds
		if c := in.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t <= 0 || t > maxAffinitySeconds {
				warn.add("service %s/%s: spec.sessionAffinityConfig.clientIP.timeoutSeconds %d out of range 1-%d, using %d",
					in.Namespace, in.Name, t, maxAffinitySeconds, defaultAffinitySeconds)
			} else {
				out.ClientIpAffinitySeconds = t
			}
		}
	} else if in.Spec.SessionAffinity != "" && in.Spec.SessionAffinity != corev1.ServiceAffinityNone {
		warn.add("service %s/%s: spec.sessionAffinity %q unknown, using None", in.Namespace, in.Name, in.Spec.SessionAffinity)
	}

	out.ExternalTrafficPolicy = trafficPolicy(string(in.Spec.ExternalTrafficPolicy), "spec.externalTrafficPolicy", in, &warn)
	if in.Spec.InternalTrafficPolicy != nil {
		out.InternalTrafficPolicy = trafficPolicy(string(*in.Spec.InternalTrafficPolicy), "spec.internalTrafficPolicy", in, &warn)
	}
	if hc := in.Spec.HealthCheckNodePort; hc != 0 {
		if hc < 0 || hc > 65535 {
			warn.add("service %s/%s: spec.healthCheckNodePort %d dropped: out of range", in.Namespace, in.Name, hc)
		} else {
			out.HealthCheckNodePort = hc
		}
	}
	if v, ok := in.Labels[LabelServiceProxyName]; ok {
		out.ServiceProxyName = &v
	}
	return out, warn, nil
}

func trafficPolicy(v, field string, svc *corev1.Service, warn *Warnings) globalv1.TrafficPolicy {
	switch v {
	case "":
		return globalv1.TrafficPolicy_TRAFFIC_POLICY_UNSPECIFIED
	case "Cluster":
		return globalv1.TrafficPolicy_CLUSTER
	case "Local":
		return globalv1.TrafficPolicy_LOCAL
	}
	warn.add("service %s/%s: %s %q unknown, using Cluster", svc.Namespace, svc.Name, field, v)
	return globalv1.TrafficPolicy_CLUSTER
}

func servicePortFromK8s(p *corev1.ServicePort) (*globalv1.ServicePort, error) {
	proto, err := protocol(p.Protocol)
	if err != nil {
		return nil, err
	}
	if p.Port < 1 || p.Port > 65535 {
		return nil, fmt.Errorf("port %d out of range 1-65535", p.Port)
	}
	if p.NodePort < 0 || p.NodePort > 65535 {
		return nil, fmt.Errorf("nodePort %d out of range", p.NodePort)
	}
	out := &globalv1.ServicePort{
		Name:     p.Name,
		Protocol: proto,
		Port:     p.Port,
		NodePort: p.NodePort,
	}
	if p.TargetPort.StrVal != "" {
		out.TargetPortName = p.TargetPort.StrVal
	} else {
		tp := p.TargetPort.IntVal
		if tp < 0 || tp > 65535 {
			return nil, fmt.Errorf("targetPort %d out of range", tp)
		}
		if tp == 0 {
			tp = p.Port // the API server's default
		}
		out.TargetPort = tp
	}
	return out, nil
}

func protocol(p corev1.Protocol) (globalv1.Protocol, error) {
	switch p {
	case "", corev1.ProtocolTCP:
		return globalv1.Protocol_TCP, nil
	case corev1.ProtocolUDP:
		return globalv1.Protocol_UDP, nil
	case corev1.ProtocolSCTP:
		return globalv1.Protocol_SCTP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q", p)
}

// parseIP returns the canonical form of an IP address, read as kube-proxy
// reads it (k8s.io/utils/net.ParseIPSloppy): IPv4 octets may carry leading
// zeros, and an IPv4-mapped IPv6 address is its IPv4 address.
func parseIP(s string) (string, error) {
	addr, err := parseIPSloppy(s)
	if err != nil {
		return "", fmt.Errorf("invalid IP address %q", s)
	}
	if addr.Zone() != "" {
		return "", fmt.Errorf("invalid IP address %q: zones are not allowed", s)
	}
	return addr.Unmap().String(), nil
}

// parseCIDR returns the canonical, masked form of a CIDR, read as kube-proxy
// reads it (k8s.io/utils/net.ParseCIDRSloppy): sloppy addresses as in
// parseIP, and an IPv4-mapped prefix is the IPv4 prefix.
func parseCIDR(s string) (string, error) {
	addrPart, bitsPart, ok := strings.Cut(s, "/")
	addr, err := parseIPSloppy(addrPart)
	if !ok || err != nil || addr.Zone() != "" {
		return "", fmt.Errorf("invalid CIDR %q", s)
	}
	bits, err := decimal(bitsPart)
	if err != nil || bits > addr.BitLen() {
		return "", fmt.Errorf("invalid CIDR %q", s)
	}
	p := netip.PrefixFrom(addr, bits).Masked()
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.String(), nil
}

// parseIPSloppy is netip.ParseAddr, also accepting leading zeros in IPv4
// octets (alone or as the tail of an IPv6 address) and in IPv6 groups of
// more than four digits, the way the API server validated addresses before
// Kubernetes 1.20, so that old objects still in etcd may carry them.
func parseIPSloppy(s string) (netip.Addr, error) {
	if addr, err := netip.ParseAddr(s); err == nil {
		return addr, nil
	}
	if !strings.Contains(s, ":") {
		return parseSloppyIPv4(s)
	}
	groups := strings.Split(s, ":")
	for i, g := range groups {
		if i == len(groups)-1 && strings.Contains(g, ".") {
			v4, err := parseSloppyIPv4(g)
			if err != nil {
				return netip.Addr{}, err
			}
			groups[i] = v4.String()
		} else if len(g) > 4 && strings.Trim(g, "0123456789abcdefABCDEF") == "" {
			if g = strings.TrimLeft(g, "0"); g == "" {
				g = "0"
			}
			groups[i] = g
		}
	}
	return netip.ParseAddr(strings.Join(groups, ":"))
}

// parseSloppyIPv4 reads "010.001.002.003" as 10.1.2.3: octets are decimal
// whatever their leading zeros.
func parseSloppyIPv4(s string) (netip.Addr, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, fmt.Errorf("not an IPv4 address")
	}
	var b [4]byte
	for i, p := range parts {
		n, err := decimal(p)
		if err != nil || n > 255 {
			return netip.Addr{}, fmt.Errorf("not an IPv4 address")
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), nil
}

// decimal reads a non-empty string of ASCII digits (leading zeros allowed,
// no sign) that stays below 1<<24.
func decimal(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("not a number")
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("not a number")
		}
		n = n*10 + int(c-'0')
		if n >= 1<<24 {
			return 0, fmt.Errorf("number too large")
		}
	}
	return n, nil
}

// EndpointSliceFromK8s converts a discovery/v1 EndpointSlice into the
// cluster model. Endpoints with an address that does not parse or does not
// match the slice's address type are dropped with a warning.
func EndpointSliceFromK8s(in *discoveryv1.EndpointSlice) (*globalv1.EndpointSlice, Warnings, error) {
	if in == nil {
		return nil, nil, fmt.Errorf("endpointslice: nil object")
	}
	if in.Name == "" {
		return nil, nil, fmt.Errorf("endpointslice: metadata.name is empty")
	}
	svcName := in.Labels[LabelServiceName]
	if svcName == "" {
		return nil, nil, fmt.Errorf("endpointslice %s/%s: no %s label: it belongs to no service", in.Namespace, in.Name, LabelServiceName)
	}
	var warn Warnings
	out := &globalv1.EndpointSlice{
		Namespace:   in.Namespace,
		Name:        in.Name,
		ServiceName: svcName,
	}
	switch in.AddressType {
	case discoveryv1.AddressTypeIPv4:
		out.AddressType = globalv1.AddressType_IPV4
	case discoveryv1.AddressTypeIPv6:
		out.AddressType = globalv1.AddressType_IPV6
	case discoveryv1.AddressTypeFQDN:
		out.AddressType = globalv1.AddressType_FQDN
	default:
		return nil, nil, fmt.Errorf("endpointslice %s/%s: addressType: unknown type %q", in.Namespace, in.Name, in.AddressType)
	}
	_, out.HeadlessLabel = in.Labels[LabelHeadless]
	if t, ok := in.Annotations[AnnotationTriggerTime]; ok {
		ts, err := time.Parse(time.RFC3339Nano, t)
		switch {
		case err != nil:
			warn.add("endpointslice %s/%s: annotation %s ignored: %v", in.Namespace, in.Name, AnnotationTriggerTime, err)
		case !time.Unix(0, ts.UnixNano()).Equal(ts):
			// UnixNano wraps outside 1678-2262: a garbage time would poison
			// the sync-latency metrics instead of being absent.
			warn.add("endpointslice %s/%s: annotation %s ignored: %q is out of range", in.Namespace, in.Name, AnnotationTriggerTime, t)
		default:
			out.TriggerTimeUnixNano = ts.UnixNano()
		}
	}

	for i, p := range in.Ports {
		ep := &globalv1.EndpointPort{Name: copyPtr(p.Name)}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		var err error
		if ep.Protocol, err = protocol(proto); err != nil {
			warn.add("endpointslice %s/%s: ports[%d] dropped: %v", in.Namespace, in.Name, i, err)
			continue
		}
		if p.Port != nil {
			if *p.Port < 0 || *p.Port > 65535 {
				warn.add("endpointslice %s/%s: ports[%d] dropped: port %d out of range", in.Namespace, in.Name, i, *p.Port)
				continue
			}
			ep.Port = *p.Port
		}
		out.Ports = append(out.Ports, ep)
	}

	for i := range in.Endpoints {
		e := &in.Endpoints[i]
		if len(e.Addresses) == 0 {
			warn.add("endpointslice %s/%s: endpoints[%d] dropped: no addresses", in.Namespace, in.Name, i)
			continue
		}
		ge := &globalv1.Endpoint{
			Ready:       copyPtr(e.Conditions.Ready),
			Serving:     copyPtr(e.Conditions.Serving),
			Terminating: copyPtr(e.Conditions.Terminating),
		}
		if out.AddressType == globalv1.AddressType_FQDN {
			ge.Addresses = append(ge.Addresses, e.Addresses...)
		} else {
			bad := false
			for j, a := range e.Addresses {
				addr, err := parseIP(a)
				if err == nil && (strings.Contains(addr, ":") != (out.AddressType == globalv1.AddressType_IPV6)) {
					err = fmt.Errorf("address %q is not of type %s", a, in.AddressType)
				}
				if err != nil {
					warn.add("endpointslice %s/%s: endpoints[%d] dropped: addresses[%d]: %v", in.Namespace, in.Name, i, j, err)
					bad = true
					break
				}
				ge.Addresses = append(ge.Addresses, addr)
			}
			if bad {
				continue
			}
		}
		if e.NodeName != nil {
			ge.NodeName = *e.NodeName
		}
		if e.Zone != nil {
			ge.Zone = *e.Zone
		}
		if e.Hints != nil {
			for _, z := range e.Hints.ForZones {
				ge.HintZones = append(ge.HintZones, z.Name)
			}
			for _, n := range e.Hints.ForNodes {
				ge.HintNodes = append(ge.HintNodes, n.Name)
			}
		}
		out.Endpoints = append(out.Endpoints, ge)
	}
	return out, warn, nil
}

// copyPtr returns a pointer to a copy of *p (nil for nil), so that the
// output shares no memory with the Kubernetes object: a source may decode
// the next object into the same struct, and json writes through existing
// pointers.
func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// NodeFromK8s converts a v1 Node into the cluster model.
func NodeFromK8s(in *corev1.Node) (*globalv1.Node, Warnings, error) {
	if in == nil {
		return nil, nil, fmt.Errorf("node: nil object")
	}
	if in.Name == "" {
		return nil, nil, fmt.Errorf("node: metadata.name is empty")
	}
	var warn Warnings
	out := &globalv1.Node{Name: in.Name, Zone: in.Labels[LabelTopologyZone]}
	// InternalIPs first, then ExternalIPs, as kube-proxy orders them, so
	// that the first address of a family is the one kube-proxy takes as the
	// node's primary IP in that family.
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for i, a := range in.Status.Addresses {
			if a.Type != typ {
				continue
			}
			addr, err := parseIP(a.Address)
			if err != nil {
				warn.add("node %s: status.addresses[%d] dropped: %v", in.Name, i, err)
				continue
			}
			out.Addresses = append(out.Addresses, addr)
		}
	}
	cidrs := in.Spec.PodCIDRs
	field := func(i int) string { return fmt.Sprintf("spec.podCIDRs[%d]", i) }
	if len(cidrs) == 0 && in.Spec.PodCIDR != "" {
		cidrs = []string{in.Spec.PodCIDR}
		field = func(int) string { return "spec.podCIDR (as spec.podCIDRs[0])" }
	}
	for i, c := range cidrs {
		prefix, err := parseCIDR(c)
		if err != nil {
			warn.add("node %s: %s dropped: %v", in.Name, field(i), err)
			continue
		}
		out.PodCidrs = append(out.PodCidrs, prefix)
	}
	return out, warn, nil
}

// ServiceCIDRFromK8s converts a networking/v1 ServiceCIDR into the cluster model.
func ServiceCIDRFromK8s(in *networkingv1.ServiceCIDR) (*globalv1.ServiceCIDR, Warnings, error) {
	if in == nil {
		return nil, nil, fmt.Errorf("servicecidr: nil object")
	}
	if in.Name == "" {
		return nil, nil, fmt.Errorf("servicecidr: metadata.name is empty")
	}
	var warn Warnings
	out := &globalv1.ServiceCIDR{Name: in.Name}
	for i, c := range in.Spec.CIDRs {
		prefix, err := parseCIDR(c)
		if err != nil {
			warn.add("servicecidr %s: spec.cidrs[%d] dropped: %v", in.Name, i, err)
			continue
		}
		out.Cidrs = append(out.Cidrs, prefix)
	}
	return out, warn, nil
}
