package netlab

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/kpng/kpng/source/file"
)

// The lab's cluster-wide ranges, as its State describes them.
var (
	// ServiceCIDRv4 and ServiceCIDRv6 are the cluster's ServiceCIDR
	// "kubernetes": AddService allocates cluster IPs from them.
	ServiceCIDRv4 = netip.MustParsePrefix("10.96.0.0/16")
	ServiceCIDRv6 = netip.MustParsePrefix("fd00:10:96::/112")
	// ClusterCIDRv4 and ClusterCIDRv6 hold every node's pod CIDR (a proxy's
	// --cluster-cidr).
	ClusterCIDRv4 = netip.MustParsePrefix("10.244.0.0/16")
	ClusterCIDRv6 = netip.MustParsePrefix("fd00:10:244::/56")
)

// ZoneLabel is the node label that carries its zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// State is a cluster's state as `kpng file --input` reads it: typed
// Kubernetes objects, written as `kubectl get -o yaml` prints them. Tests
// state their services with AddService and SetEndpoints, adjust the returned
// objects' fields directly (they are the k8s.io/api types users know), and
// call Write: the file is replaced atomically, and kpng's file source follows
// it. A State is safe for use by one goroutine at a time; Write may be called
// from any.
type State struct {
	// Path is the file Write replaces.
	Path string

	Nodes        []*corev1.Node
	ServiceCIDRs []*networkingv1.ServiceCIDR
	Services     []*corev1.Service
	Slices       []*discoveryv1.EndpointSlice

	lab    *Lab
	nextIP int
	mu     sync.Mutex // serializes Write
	digest string     // of the content Write wrote last (file.Digest)
}

// NewState returns the state of lab's cluster with no services yet: a Node
// per lab node (its node IPs as InternalIPs, its pod CIDRs, zone "zone-a",
// "zone-b", ... in node order) and the ServiceCIDR "kubernetes". The file
// is in t's temporary directory, which lives as long as t: pass the test
// that owns the lab, not a subtest. NewState writes it once.
func NewState(t testing.TB, lab *Lab) *State {
	t.Helper()
	s := &State{Path: filepath.Join(t.TempDir(), "cluster.yaml"), lab: lab, nextIP: 10}
	for _, n := range lab.Nodes {
		s.Nodes = append(s.Nodes, &corev1.Node{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{
				Name:   n.Name,
				Labels: map[string]string{ZoneLabel: Zone(n)},
			},
			Spec: corev1.NodeSpec{
				PodCIDR:  n.PodCIDRs[0].String(),
				PodCIDRs: []string{n.PodCIDRs[0].String(), n.PodCIDRs[1].String()},
			},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.IPv4.String()},
				{Type: corev1.NodeInternalIP, Address: n.IPv6.String()},
				{Type: corev1.NodeHostName, Address: n.Name},
			}},
		})
	}
	s.ServiceCIDRs = []*networkingv1.ServiceCIDR{{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{ServiceCIDRv4.String(), ServiceCIDRv6.String()}},
	}}
	s.Write(t)
	return s
}

// Zone is the zone NewState gives node n: "zone-a" for the first node,
// "zone-b" for the second, ...
func Zone(n *Node) string { return fmt.Sprintf("zone-%c", 'a'+n.Index%26) }

// TCPPort and UDPPort make a service port: port on the service, sent to
// target on the endpoints.
func TCPPort(name string, port, target int) corev1.ServicePort {
	return servicePort(name, corev1.ProtocolTCP, port, target)
}

// UDPPort is TCPPort for UDP.
func UDPPort(name string, port, target int) corev1.ServicePort {
	return servicePort(name, corev1.ProtocolUDP, port, target)
}

func servicePort(name string, proto corev1.Protocol, port, target int) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: int32(port), TargetPort: intstr.FromInt32(int32(target))}
}

// AddService adds a dual-stack ClusterIP Service "default/<name>" with the
// next free cluster IPs of ServiceCIDRv4 and ServiceCIDRv6 (.10, .11, ...),
// and no endpoints. Change its type, node ports, policies etc. on the
// returned object.
func (s *State) AddService(name string, ports ...corev1.ServicePort) *corev1.Service {
	v4 := nthAddr(ServiceCIDRv4, s.nextIP)
	v6 := nthAddr(ServiceCIDRv6, s.nextIP)
	s.nextIP++
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			ClusterIP:       v4.String(),
			ClusterIPs:      []string{v4.String(), v6.String()},
			IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			IPFamilyPolicy:  &policy,
			Ports:           ports,
			SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
	s.Services = append(s.Services, svc)
	return svc
}

func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Addr()
	for range n {
		a = a.Next()
	}
	return a
}

// ClusterIP returns svc's cluster IP of family (4 or 6) with port.
func ClusterIP(svc *corev1.Service, family int, port int) netip.AddrPort {
	for _, ip := range svc.Spec.ClusterIPs {
		a := netip.MustParseAddr(ip)
		if a.Is4() == (family == 4) {
			return netip.AddrPortFrom(a, uint16(port))
		}
	}
	panic(fmt.Sprintf("service %s has no IPv%d cluster IP", svc.Name, family))
}

// Endpoint is one endpoint of a service: a pod, or a node for a
// host-network endpoint, with its conditions.
type Endpoint struct {
	Host *Host
	// Node is the node the endpoint runs on.
	Node                        *Node
	Ready, Serving, Terminating bool
}

// Ready returns pods as ready (and serving, not terminating) endpoints.
func Ready(pods ...*Pod) []Endpoint {
	eps := make([]Endpoint, len(pods))
	for i, p := range pods {
		eps[i] = Endpoint{Host: &p.Host, Node: p.Node, Ready: true, Serving: true}
	}
	return eps
}

// Terminating returns pods as terminating endpoints that are still serving
// (not ready), as during a graceful shutdown.
func Terminating(pods ...*Pod) []Endpoint {
	eps := make([]Endpoint, len(pods))
	for i, p := range pods {
		eps[i] = Endpoint{Host: &p.Host, Node: p.Node, Serving: true, Terminating: true}
	}
	return eps
}

// SetEndpoints replaces svc's EndpointSlices with one per IP family of svc,
// named "<svc>-v4" / "<svc>-v6", listing eps with svc's target ports.
func (s *State) SetEndpoints(svc *corev1.Service, eps ...Endpoint) {
	kept := s.Slices[:0]
	for _, sl := range s.Slices {
		if sl.Namespace != svc.Namespace || sl.Labels[discoveryv1.LabelServiceName] != svc.Name {
			kept = append(kept, sl)
		}
	}
	s.Slices = kept
	var ports []discoveryv1.EndpointPort
	for _, p := range svc.Spec.Ports {
		ports = append(ports, discoveryv1.EndpointPort{
			Name:     ptr(p.Name),
			Protocol: ptr(p.Protocol),
			Port:     ptr(p.TargetPort.IntVal),
		})
	}
	for _, fam := range svc.Spec.IPFamilies {
		family, suffix, addrType := 4, "-v4", discoveryv1.AddressTypeIPv4
		if fam == corev1.IPv6Protocol {
			family, suffix, addrType = 6, "-v6", discoveryv1.AddressTypeIPv6
		}
		sl := &discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{
				Namespace: svc.Namespace,
				Name:      svc.Name + suffix,
				Labels:    map[string]string{discoveryv1.LabelServiceName: svc.Name},
			},
			AddressType: addrType,
			Ports:       ports,
			Endpoints:   []discoveryv1.Endpoint{},
		}
		for _, ep := range eps {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{ep.Host.Addr(family).String()},
				Conditions: discoveryv1.EndpointConditions{
					Ready: ptr(ep.Ready), Serving: ptr(ep.Serving), Terminating: ptr(ep.Terminating),
				},
				NodeName: ptr(ep.Node.Name),
				Zone:     ptr(Zone(ep.Node)),
			})
		}
		s.Slices = append(s.Slices, sl)
	}
}

func ptr[T any](v T) *T { return &v }

// Marshal returns the state as a YAML stream, one document per object.
func (s *State) Marshal() ([]byte, error) {
	var objs []any
	for _, o := range s.Nodes {
		objs = append(objs, o)
	}
	for _, o := range s.ServiceCIDRs {
		objs = append(objs, o)
	}
	for _, o := range s.Services {
		objs = append(objs, o)
	}
	for _, o := range s.Slices {
		objs = append(objs, o)
	}
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("state: %w", err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

// Digest names the content the last Write wrote, as kpng's file source
// logs it when it has loaded it (see StateLoader).
func (s *State) Digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.digest
}

// Write replaces the state file atomically (a temporary file renamed over
// it), so a watcher never reads half a state. It fails the test on error.
func (s *State) Write(t testing.TB) {
	t.Helper()
	if err := s.write(); err != nil {
		t.Fatalf("netlab: %v", err)
	}
}

func (s *State) write() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.Marshal()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(s.Path), ".cluster-*.yaml")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("write state: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(f.Name(), s.Path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write state: %w", err)
	}
	s.digest = file.Digest(b)
	return nil
}
