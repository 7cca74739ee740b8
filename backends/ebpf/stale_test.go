package ebpf

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// fakeDestroyer records the flows it is asked to destroy.
type fakeDestroyer struct {
	calls [][]StaleFlow
	fail  int // the next fail calls fail
}

func (f *fakeDestroyer) DestroySockets(_ context.Context, flows []StaleFlow) (int, error) {
	f.calls = append(f.calls, slices.Clone(flows))
	if f.fail > 0 {
		f.fail--
		return 0, errors.New("iterator failed")
	}
	return len(flows), nil
}

// dnsSvc is a Service "dns" with a UDP port 53 (and, with tcp, a TCP port
// 53 too) on cluster IP 10.96.0.10 and external IP 203.0.113.1, to
// endpoints on port 5353 given as "IP state", state one of ready,
// terminating (serving), gone (terminating, not serving), notready.
func dnsSvc(tcp bool, eps ...string) *localv1.ServiceEndpoints {
	se := &localv1.ServiceEndpoints{Service: &localv1.Service{
		Namespace: "default", Name: "dns", Family: localv1.IPFamily_IPV4, Type: localv1.ServiceType_CLUSTER_IP,
		ClusterIp: "10.96.0.10", ExternalIps: []string{"203.0.113.1"},
		Ports: []*localv1.ServicePort{{Name: "udp", Protocol: localv1.Protocol_UDP, Port: 53, HasEndpoints: len(eps) > 0}},
	}}
	if tcp {
		se.Service.Ports = append(se.Service.Ports, &localv1.ServicePort{Name: "tcp", Protocol: localv1.Protocol_TCP, Port: 53, HasEndpoints: len(eps) > 0})
	}
	for _, e := range eps {
		ip, state, _ := strings.Cut(e, " ")
		for _, p := range se.Service.Ports {
			ep := &localv1.Endpoint{PortName: p.Name, Protocol: p.Protocol, Ip: ip, Port: 5353}
			switch state {
			case "ready":
				ep.Ready, ep.Serving, ep.InClusterSet = true, true, true
			case "terminating":
				ep.Serving, ep.Terminating = true, true
			case "gone":
				ep.Terminating = true
			}
			se.Endpoints = append(se.Endpoints, ep)
		}
	}
	return se
}

func flowStrings(fs []StaleFlow) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

// TestStaleSockets: which sockets a sync leaves stale follows kube-proxy's
// conntrack cleanup (proxyutil/conntrack), step by step.
func TestStaleSockets(t *testing.T) {
	const (
		a = "10.0.0.1 ready"
		b = "10.0.0.2 ready"
	)
	staleA := []string{"10.96.0.10:53/udp -> 10.0.0.1:5353", "203.0.113.1:53/udp -> 10.0.0.1:5353"}
	type step struct {
		se      *localv1.ServiceEndpoints // nil: the Service is deleted
		destroy []string                  // the flows handed to the destroyer after the sync
	}
	for _, tc := range []struct {
		name  string
		tcp   bool
		steps []step
	}{
		{"an endpoint removed: its flows on every address of the port", false, []step{
			{dnsSvc(false, a, b), nil},
			{dnsSvc(false, b), staleA},
		}},
		{"an endpoint added or kept: nothing", false, []step{
			{dnsSvc(false, a), nil},
			{dnsSvc(false, a, b), nil},
			{dnsSvc(false, b, a), nil},
		}},
		{"a terminating endpoint that still serves keeps its flows until it stops serving", false, []step{
			{dnsSvc(false, a, b), nil},
			{dnsSvc(false, "10.0.0.1 terminating", b), nil},
			{dnsSvc(false, "10.0.0.1 gone", b), staleA},
		}},
		{"an endpoint no longer ready nor serving", false, []step{
			{dnsSvc(false, a, b), nil},
			{dnsSvc(false, "10.0.0.1 notready", b), staleA},
		}},
		{"a port without serving endpoints keeps its flows until some serve again", false, []step{
			{dnsSvc(false, a), nil},
			{dnsSvc(false), nil},
			{dnsSvc(false, "10.0.0.1 gone"), nil},
			{dnsSvc(false, b), staleA},
		}},
		{"an endpoint that went and came back while none served", false, []step{
			{dnsSvc(false, a), nil},
			{dnsSvc(false), nil},
			{dnsSvc(false, a), nil},
		}},
		{"a deleted Service leaves its flows", false, []step{
			{dnsSvc(false, a, b), nil},
			{nil, nil},
			{dnsSvc(false, b), nil},
		}},
		{"TCP ports are left alone, as kube-proxy does", false, []step{
			{dnsSvc(true, a, b), nil},
			{dnsSvc(true, b), staleA},
		}},
		{"TCP ports too when asked", true, []step{
			{dnsSvc(true, a, b), nil},
			{dnsSvc(true, b), append(slices.Clone(staleA), "10.96.0.10:53/tcp -> 10.0.0.1:5353", "203.0.113.1:53/tcp -> 10.0.0.1:5353")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			fd := &fakeDestroyer{}
			h.d.SetSocketDestroyer(fd, tc.tcp)
			for i, s := range tc.steps {
				fd.calls = nil
				var err error
				if s.se == nil {
					err = h.sync(nil, "dns")
				} else {
					err = h.sync([]*localv1.ServiceEndpoints{s.se})
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				var got []string
				for _, c := range fd.calls {
					got = append(got, flowStrings(c)...)
				}
				slices.Sort(got)
				want := slices.Sorted(slices.Values(s.destroy))
				if !slices.Equal(got, want) {
					t.Errorf("step %d destroyed %q, want %q", i, got, want)
				}
			}
		})
	}
}

// TestStaleSocketsRetried: a destroy that fails is retried after the next
// sync, given up after maxDestroyAttempts, and not retried once the
// endpoint serves again.
func TestStaleSocketsRetried(t *testing.T) {
	h := newHarness(t, nil)
	fd := &fakeDestroyer{fail: 1}
	h.d.SetSocketDestroyer(fd, false)
	a, b := "10.0.0.1 ready", "10.0.0.2 ready"
	if err := h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, a, b)}); err != nil {
		t.Fatal(err)
	}
	if err := h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, b)}); err != nil {
		t.Fatal(err) // a failed destroy is not the sync's failure
	}
	if err := h.sync(nil); err != nil { // the periodic sync
		t.Fatal(err)
	}
	if len(fd.calls) != 2 || !slices.Equal(fd.calls[0], fd.calls[1]) || len(fd.calls[0]) != 2 {
		t.Fatalf("destroy calls %v, want the same 2 flows twice", fd.calls)
	}
	if err := h.sync(nil); err != nil {
		t.Fatal(err)
	}
	if len(fd.calls) != 2 {
		t.Errorf("destroyed again after a success: %v", fd.calls)
	}

	// Given up after maxDestroyAttempts.
	fd.calls, fd.fail = nil, 100
	h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, a, b)})
	h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, a)})
	for range 10 {
		h.sync(nil)
	}
	if len(fd.calls) != maxDestroyAttempts {
		t.Errorf("%d attempts, want %d", len(fd.calls), maxDestroyAttempts)
	}

	// The endpoint serves again before the retry: not destroyed.
	fd.calls, fd.fail = nil, 1
	h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, a, b)})
	h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, a)}) // fails
	h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, a, b)})
	if len(fd.calls) != 1 {
		t.Errorf("destroy calls %v, want only the failed one", fd.calls)
	}
}

// TestStaleSocketsAfterRestart: a new run of kpng (its first sync is a
// reset) finds the endpoints sockets may be connected to in the kernel's
// sets.
func TestStaleSocketsAfterRestart(t *testing.T) {
	fake := NewFakeMaps()
	h := newHarness(t, fake)
	if err := h.sync([]*localv1.ServiceEndpoints{dnsSvc(false, "10.0.0.1 ready", "10.0.0.2 ready")}); err != nil {
		t.Fatal(err)
	}
	h2 := newHarness(t, fake)
	fd := &fakeDestroyer{}
	h2.d.SetSocketDestroyer(fd, false)
	if err := h2.sync([]*localv1.ServiceEndpoints{dnsSvc(false, "10.0.0.2 ready")}); err != nil {
		t.Fatal(err)
	}
	if len(fd.calls) != 1 || len(fd.calls[0]) != 2 || fd.calls[0][0].Endpoint != netip.MustParseAddrPort("10.0.0.1:5353") {
		t.Errorf("destroy calls after a restart: %v", fd.calls)
	}
}

// TestPortBaseIsRendersAffinityKey: the tracker finds a port's frontends
// by the name Render gives the port.
func TestPortBaseIsRendersAffinityKey(t *testing.T) {
	se := dnsSvc(true, "10.0.0.1 ready")
	r, err := Render(se, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := backend.KeyOf(se)
	for f, rt := range r.Frontends {
		name := map[uint8]string{protoUDP: "udp", protoTCP: "tcp"}[f.Proto]
		if want := portBase(k, name, f.Proto); rt.AffinityKey != want {
			t.Errorf("frontend %s: Render's key %q, portBase %q", f, rt.AffinityKey, want)
		}
	}
}
