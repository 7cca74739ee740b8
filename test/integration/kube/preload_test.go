//go:build integration

package kube

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// preload creates n Services ("svc-0" ...), each with one EndpointSlice of
// perService ready endpoints spread over 10 nodes and 3 zones, with
// concurrent requests (the admin client is not rate-limited).
func preload(tb testing.TB, c kubernetes.Interface, n, perService int) {
	tb.Helper()
	const workers = 32
	jobs := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	base := netip.MustParseAddr("10.100.0.0").As4()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				name := fmt.Sprintf("svc-%d", i)
				if _, err := c.CoreV1().Services("default").Create(context.Background(), newService(name, false, nil), metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("service %s: %w", name, err)
					return
				}
				var eps []discoveryv1.Endpoint
				for j := range perService {
					k := uint32(i*perService + j)
					ip := netip.AddrFrom4([4]byte{base[0], base[1] + byte(k>>16), byte(k >> 8), byte(k)})
					eps = append(eps, newEndpoint(ip.String(), fmt.Sprintf("node-%d", j%10), fmt.Sprintf("zone-%d", j%3), ready))
				}
				sl := newSlice(name, name+"-1", discoveryv1.AddressTypeIPv4, eps...)
				if _, err := c.DiscoveryV1().EndpointSlices("default").Create(context.Background(), sl, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("endpointslice %s: %w", sl.Name, err)
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case jobs <- i:
		case err = <-errs:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	if err != nil {
		tb.Fatalf("preloading %d services: %v", n, err)
	}
}

// Nothing is published before every watch has delivered its initial list:
// the first view a backend gets is the whole cluster, in one revision.
func TestFirstViewIsComplete(t *testing.T) {
	const n, perService = 300, 10
	api := apiserver.Start(t)
	preload(t, api.Client, n, perService)
	o := objects{t, api.Client}
	o.createNode(newNode("node-1", "zone-0", "192.168.0.1"))

	h := startSource(t, api, brain.Options{NodeName: "node-1"})
	first := h.waitFor("the first view", func(delivery) bool { return true })
	if first.Revision != 1 {
		t.Errorf("first view at revision %d, want 1", first.Revision)
	}
	if got := len(first.Services); got != n+1 {
		t.Errorf("first view has %d services, want %d (and kubernetes)", got, n)
	}
	for i := range n {
		if got := len(first.endpoints(key(fmt.Sprintf("svc-%d", i), v4))); got != perService {
			t.Errorf("svc-%d has %d endpoints in the first view, want %d", i, got, perService)
		}
	}
	if first.Node.GetZone() != "zone-0" || len(first.CIDRs) != 2 {
		t.Errorf("first view without the node (%v) or the service CIDRs (%v)", first.Node, first.CIDRs)
	}
	st := h.store.Stats()
	// One revision per object (n services and slices, kubernetes, the
	// node, the ServiceCIDR) and one for being synced; at least as many
	// events (the API server may still be updating its ServiceCIDR's
	// status, which kpng does not read).
	if want := uint64(2*n + 3); st.Events < want || st.Revision != want+1 {
		t.Errorf("store: %d events, revision %d; want %d events or more, revision %d", st.Events, st.Revision, want, want+1)
	}
}
