package healthcheck

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// freePort returns a TCP port that is free on the loopback addresses now.
func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

func lbService(name string, f localv1.IPFamily, port int32, eps ...*localv1.Endpoint) *localv1.ServiceEndpoints {
	return &localv1.ServiceEndpoints{
		Service: &localv1.Service{Namespace: "ns", Name: name, Family: f, Type: localv1.ServiceType_LOAD_BALANCER,
			ExternalTrafficPolicy: localv1.TrafficPolicy_LOCAL, HealthCheckNodePort: port,
			Ports: []*localv1.ServicePort{{Name: "http", Protocol: localv1.Protocol_TCP, Port: 80, NodePort: 30080, HasEndpoints: len(eps) > 0}}},
		Endpoints: eps,
	}
}

func localEP(ip string, ready bool, port string) *localv1.Endpoint {
	return &localv1.Endpoint{PortName: port, Protocol: localv1.Protocol_TCP, Ip: ip, Port: 8080, Ready: ready, Serving: true,
		Terminating: !ready, OnThisNode: true, InLocalSet: true, InClusterSet: true}
}

type answer struct {
	code   int
	weight string
	body   string
	err    error
}

func check(host string, port int32) answer {
	resp, err := http.Get("http://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + "/")
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), body: string(b)}
}

func body(name string, n int, healthy bool) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}", name, n, healthy)
}

type fakeHealth struct{ healthy bool }

func (f *fakeHealth) Health() ProxyHealth { return ProxyHealth{Healthy: f.healthy} }

func refused(a answer) bool { return errors.Is(a.err, syscall.ECONNREFUSED) }

func TestServiceHealth(t *testing.T) {
	v4, v6 := localv1.IPFamily_IPV4, localv1.IPFamily_IPV6
	proxy := &fakeHealth{healthy: true}
	s := NewServiceHealthServer(ServiceOptions{NodePortAddresses: []string{"127.0.0.0/8", "::1/128"}, Proxy: proxy})
	defer s.Close()
	p1, p2 := freePort(t), freePort(t)
	ka, ka6, kb := backend.ServiceKey{Namespace: "ns", Name: "a", Family: v4}, backend.ServiceKey{Namespace: "ns", Name: "a", Family: v6}, backend.ServiceKey{Namespace: "ns", Name: "b", Family: v4}

	st := backend.NewState("n1")
	st.Services[ka] = lbService("a", v4, p1)
	st.Services[ka6] = lbService("a", v6, p1, localEP("fd00::1", true, "http"))
	st.Services[kb] = lbService("b", v4, 0) // no health check port: nothing opened
	s.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Reset: true}})
	if got := s.Ports(); len(got) != 2 || got[ka] != p1 || got[ka6] != p1 {
		t.Fatalf("open ports %v, want a/v4 and a/v6 on %d", got, p1)
	}

	// No local endpoint: 503 with weight 0; IPv6 has one: 200.
	if a := check("127.0.0.1", p1); a.code != 503 || a.weight != "0" || a.body != body("a", 0, true) {
		t.Errorf("a/v4 without local endpoints: %+v", a)
	}
	if a := check("::1", p1); a.code != 200 || a.weight != "1" || a.body != body("a", 1, true) {
		t.Errorf("a/v6 with one local endpoint: %+v", a)
	}

	// Two ports of one pod count once; a terminating (not ready) one not at all.
	st.Services[ka] = lbService("a", v4, p1, localEP("10.0.0.1", true, "http"), localEP("10.0.0.1", true, "https"),
		localEP("10.0.0.2", true, "http"), localEP("10.0.0.3", false, "http"))
	s.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Set: []backend.ServiceKey{ka}}})
	if a := check("127.0.0.1", p1); a.code != 200 || a.weight != "2" || a.body != body("a", 2, true) {
		t.Errorf("a/v4 with two local pods: %+v", a)
	}

	// An unhealthy proxy fails every check.
	proxy.healthy = false
	if a := check("127.0.0.1", p1); a.code != 503 || a.body != body("a", 2, false) {
		t.Errorf("unhealthy proxy: %+v", a)
	}
	proxy.healthy = true

	// A failed sync changes nothing.
	delete(st.Services, ka)
	s.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Deleted: []backend.ServiceKey{ka}}, Err: errors.New("boom")})
	if a := check("127.0.0.1", p1); a.code != 200 {
		t.Errorf("after a failed sync: %+v", a)
	}

	// Port moves: the old one closes, the new one answers.
	st.Services[ka] = lbService("a", v4, p2, localEP("10.0.0.1", true, "http"))
	s.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Set: []backend.ServiceKey{ka}}})
	if a := check("127.0.0.1", p1); !refused(a) {
		t.Errorf("old port after the move: %+v, want refused", a)
	}
	if a := check("127.0.0.1", p2); a.code != 200 || a.weight != "1" {
		t.Errorf("new port: %+v", a)
	}
	if a := check("::1", p1); a.code != 200 {
		t.Errorf("the IPv6 entry kept its port: %+v", a)
	}

	// Deleted: closed.
	delete(st.Services, ka6)
	s.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Deleted: []backend.ServiceKey{ka6}}})
	if a := check("::1", p1); !refused(a) {
		t.Errorf("deleted service: %+v, want refused", a)
	}

	// A reset forgets what the state does not hold.
	delete(st.Services, ka)
	s.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Reset: true}})
	if got := s.Ports(); len(got) != 0 {
		t.Errorf("after a reset without services: %v", got)
	}
	if a := check("127.0.0.1", p2); !refused(a) {
		t.Errorf("after the reset: %+v, want refused", a)
	}
}

func TestServiceHealthRetriesBusyPort(t *testing.T) {
	blocker, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(blocker.Addr().(*net.TCPAddr).Port)
	var mu sync.Mutex
	var reported []string
	s := NewServiceHealthServer(ServiceOptions{NodePortAddresses: []string{"127.0.0.1/32"},
		OnListenError: func(ns, name string, p int32, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, fmt.Sprintf("%s/%s:%d", ns, name, p))
		}})
	defer s.Close()
	k := backend.ServiceKey{Namespace: "ns", Name: "a", Family: localv1.IPFamily_IPV4}
	st := backend.NewState("n1")
	st.Services[k] = lbService("a", localv1.IPFamily_IPV4, port, localEP("10.0.0.1", true, "http"))
	s.Sync(st, backend.Changes{Reset: true})
	if len(s.Ports()) != 0 || !slices.Equal(reported, []string{fmt.Sprintf("ns/a:%d", port)}) {
		t.Fatalf("busy port: open %v, reported %v", s.Ports(), reported)
	}
	// Still busy: reported again, not fatal.
	s.Sync(st, backend.Changes{})
	if len(reported) != 2 {
		t.Errorf("reports %v, want a second one", reported)
	}
	// Freed: the next sync (which changes nothing) opens it.
	blocker.Close()
	s.Sync(st, backend.Changes{})
	if a := check("127.0.0.1", port); a.code != 200 {
		t.Errorf("after the retry: %+v", a)
	}
}

func TestListenIPs(t *testing.T) {
	v4, v6 := localv1.IPFamily_IPV4, localv1.IPFamily_IPV6
	ifaddrs := func() ([]net.Addr, error) {
		var out []net.Addr
		for _, s := range []string{"127.0.0.1/8", "192.0.2.10/24", "192.0.2.11/24", "198.51.100.1/24", "::1/128", "2001:db8::10/64", "fe80::1/64"} {
			ip, n, _ := net.ParseCIDR(s)
			out = append(out, &net.IPNet{IP: ip, Mask: n.Mask})
		}
		return out, nil
	}
	node := &localv1.Node{Addresses: []string{"192.0.2.11", "2001:db8::10", "192.0.2.10"}}
	for _, tc := range []struct {
		name   string
		family localv1.IPFamily
		npa    []string
		node   *localv1.Node
		want   []string
	}{
		{"none: all addresses", v4, nil, node, []string{"0.0.0.0"}},
		{"none: all IPv6 addresses", v6, nil, node, []string{"::"}},
		{"a CIDR selects interface addresses", v4, []string{"192.0.2.0/24"}, node, []string{"192.0.2.10", "192.0.2.11"}},
		{"CIDRs of the other family only: all", v6, []string{"192.0.2.0/24"}, node, []string{"::"}},
		{"a zero CIDR: all", v4, []string{"192.0.2.0/24", "0.0.0.0/0"}, node, []string{"0.0.0.0"}},
		{"no address matches: none", v4, []string{"203.0.113.0/24"}, node, nil},
		{"primary is the node's first address of the family", v4, []string{"primary"}, node, []string{"192.0.2.11"}},
		{"primary IPv6", v6, []string{"primary"}, node, []string{"2001:db8::10"}},
		{"primary without a node: all", v4, []string{"primary"}, nil, []string{"0.0.0.0"}},
		{"primary loopback is ignored", v4, []string{"primary"}, &localv1.Node{Addresses: []string{"127.0.0.1"}}, []string{"0.0.0.0"}},
		{"loopback CIDR", v4, []string{"127.0.0.0/8"}, node, []string{"127.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ListenIPs(tc.family, tc.npa, tc.node, ifaddrs)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := ListenIPs(v4, []string{"not-a-cidr"}, node, ifaddrs); err == nil {
		t.Errorf("a bad CIDR: no error")
	}
}

func TestServiceHealthReopensWhenAddressesChange(t *testing.T) {
	var mu sync.Mutex
	hostIP := "127.0.0.2"
	s := NewServiceHealthServer(ServiceOptions{NodePortAddresses: []string{"127.0.0.2/32", "127.0.0.3/32"},
		InterfaceAddrs: func() ([]net.Addr, error) {
			mu.Lock()
			defer mu.Unlock()
			return []net.Addr{&net.IPNet{IP: net.ParseIP(hostIP), Mask: net.CIDRMask(32, 32)}, &net.IPNet{IP: net.ParseIP("::1"), Mask: net.CIDRMask(128, 128)}}, nil
		}})
	defer s.Close()
	port := freePort(t)
	k := backend.ServiceKey{Namespace: "ns", Name: "a", Family: localv1.IPFamily_IPV4}
	st := backend.NewState("n1")
	st.Services[k] = lbService("a", localv1.IPFamily_IPV4, port, localEP("10.0.0.1", true, "http"))
	s.Sync(st, backend.Changes{Reset: true})
	if a := check("127.0.0.2", port); a.code != 200 {
		t.Errorf("on 127.0.0.2: %+v", a)
	}
	if a := check("127.0.0.3", port); !refused(a) {
		t.Errorf("on 127.0.0.3 before the move: %+v, want refused", a)
	}
	// The host's address moves; a node change makes the server look again.
	mu.Lock()
	hostIP = "127.0.0.3"
	mu.Unlock()
	s.Sync(st, backend.Changes{NodeChanged: true})
	if a := check("127.0.0.2", port); !refused(a) {
		t.Errorf("on 127.0.0.2 after the move: %+v, want refused", a)
	}
	if a := check("127.0.0.3", port); a.code != 200 {
		t.Errorf("on 127.0.0.3 after the move: %+v", a)
	}
}
