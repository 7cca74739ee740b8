package backend_test

import (
	"context"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
)

// keyedBackend is an Incremental backend keyed as the interface says:
// endpoints by EndpointKeyOf within their service.
type keyedBackend struct {
	eps map[backend.ServiceKey]map[backend.EndpointKey]*localv1.Endpoint
}

func (k *keyedBackend) Reset() {
	k.eps = map[backend.ServiceKey]map[backend.EndpointKey]*localv1.Endpoint{}
}
func (k *keyedBackend) SetService(s *localv1.Service) {
	key := backend.ServiceKey{Namespace: s.Namespace, Name: s.Name, Family: s.Family}
	if k.eps[key] == nil {
		k.eps[key] = map[backend.EndpointKey]*localv1.Endpoint{}
	}
}
func (k *keyedBackend) DeleteService(key backend.ServiceKey) { delete(k.eps, key) }
func (k *keyedBackend) SetEndpoint(key backend.ServiceKey, ep *localv1.Endpoint) {
	k.eps[key][backend.EndpointKeyOf(ep)] = ep
}
func (k *keyedBackend) DeleteEndpoint(key backend.ServiceKey, ep *localv1.Endpoint) {
	delete(k.eps[key], backend.EndpointKeyOf(ep))
}
func (k *keyedBackend) Sync() error { return nil }

// One address serving one named port on two port numbers (a host-network
// DaemonSet changing its port in a rolling update) is two endpoints, as in
// kube-proxy, which keys endpoints by IP and port: an incremental backend
// must see both, and lose only the one that goes.
func TestIncrementalEndpointsOfOneAddressOnTwoPorts(t *testing.T) {
	store := cluster.NewStore()
	old := slice("a", "a-old", "192.168.0.1")
	next := slice("a", "a-new", "192.168.0.1")
	next.Ports[0].Port = 9090
	store.Update(func(tx *cluster.Tx) {
		tx.SetService(service("a", "10.96.0.1"))
		tx.SetEndpointSlice(old)
		tx.SetEndpointSlice(next)
	})
	store.MarkSynced()
	feed := local.NewFeed(store, brain.Options{NodeName: "n1"})
	inc := &keyedBackend{}
	b := backend.FromIncremental(inc)
	ctx := context.Background()
	sync := func() map[backend.EndpointKey]*localv1.Endpoint {
		t.Helper()
		st, ch, err := feed.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if inc.eps == nil {
			ch.Reset = true // as backend.Run does on the first call
		}
		if err := b.Sync(ctx, st, ch); err != nil {
			t.Fatal(err)
		}
		return inc.eps[backend.ServiceKey{Namespace: "ns", Name: "a", Family: localv1.IPFamily_IPV4}]
	}
	if eps := sync(); len(eps) != 2 {
		t.Fatalf("the backend holds %d endpoints, want 192.168.0.1 on 8080 and on 9090", len(eps))
	}
	store.Update(func(tx *cluster.Tx) { tx.DeleteEndpointSlice("ns", "a-old") })
	eps := sync()
	if len(eps) != 1 {
		t.Fatalf("after the old port went: %d endpoints, want 1", len(eps))
	}
	for _, ep := range eps {
		if ep.Port != 9090 {
			t.Errorf("the endpoint left is on port %d, want 9090", ep.Port)
		}
	}
}
