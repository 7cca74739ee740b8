//go:build integration

package kube

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// The node-local view follows Services, EndpointSlices (several per
// Service, both families, zone hints, terminating endpoints) and the node's
// zone through the real API server, one revision per change. Another
// proxy's Services and headless Services never reach kpng (the API server
// filters them, as it does for kube-proxy); --service-proxy-name adds that
// proxy's Services.
func TestLocalViewFollowsTheAPI(t *testing.T) {
	api := apiserver.Start(t)
	o := objects{t, api.Client}

	o.createNode(newNode("node-1", "zone-a", "192.168.0.1"))
	o.createService(newService("web", true, nil))
	triggered := time.Date(2025, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	a := newSlice("web", "web-a", discoveryv1.AddressTypeIPv4,
		newEndpoint("10.1.0.1", "node-1", "zone-a", ready, "zone-a"),
		newEndpoint("10.1.0.2", "node-2", "zone-b", ready, "zone-b"))
	a.Annotations = map[string]string{cluster.AnnotationTriggerTime: triggered.Format(time.RFC3339Nano)}
	o.createSlice(a)
	o.createSlice(newSlice("web", "web-b", discoveryv1.AddressTypeIPv4,
		newEndpoint("10.1.0.3", "node-3", "zone-b", terminating, "zone-b")))
	o.createSlice(newSlice("web", "web-6", discoveryv1.AddressTypeIPv6,
		newEndpoint("fd00:1::1", "node-1", "zone-a", ready)))

	o.createService(newService("other", false, map[string]string{cluster.LabelServiceProxyName: "other-proxy"}))
	o.createSlice(newSlice("other", "other-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.2.0.1", "node-1", "zone-a", ready)))
	headless := newService("headless", false, nil)
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	o.createService(headless)
	hs := newSlice("headless", "headless-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.3.0.1", "node-1", "zone-a", ready))
	hs.Labels[cluster.LabelHeadless] = ""
	o.createSlice(hs)

	h := startSource(t, api, brain.Options{NodeName: "node-1"})
	mine := startSource(t, api, brain.Options{NodeName: "node-1", ServiceProxyName: "other-proxy"})

	web4, web6, other4 := key("web", v4), key("web", v6), key("other", v4)
	first := h.waitFor("the first view", func(delivery) bool { return true })
	t.Run("first view", func(t *testing.T) {
		if first.Revision != 1 || len(h.all()) != 1 {
			t.Errorf("first view at revision %d after %d views, want the complete state in one revision", first.Revision, len(h.all()))
		}
		check(t, "services", first.keys(), "default/kubernetes/v4", "default/web/v4", "default/web/v6")
		// Only the endpoints this node may use: the zone-a hint picks
		// 10.1.0.1; the terminating one is not needed while others are ready.
		check(t, "web v4 endpoints", first.endpoints(web4), "10.1.0.1:8080 node-1 ready serving here cluster")
		check(t, "web v6 endpoints", first.endpoints(web6), "[fd00:1::1]:8080 node-1 ready serving here cluster")
		if got := first.Services[web4].TriggerTimeUnixNano; got != triggered.UnixNano() {
			t.Errorf("web v4 trigger time %d, want %d (the slice's %s annotation)", got, triggered.UnixNano(), cluster.AnnotationTriggerTime)
		}
		if n := first.Node; n == nil || n.Name != "node-1" || n.Zone != "zone-a" ||
			!slices.Equal(n.Addresses, []string{"192.168.0.1"}) || !slices.Equal(n.PodCidrs, []string{"10.244.1.0/24"}) {
			t.Errorf("node %v, want node-1 in zone-a at 192.168.0.1 with pods in 10.244.1.0/24", n)
		}
		check(t, "service CIDRs", first.CIDRs, apiserver.ServiceCIDRIPv4, apiserver.ServiceCIDRIPv6)

		// Filtered by the API server, not only by the brain.
		if svc, _ := h.stored("default", "other"); svc {
			t.Error("another proxy's Service reached the store")
		}
		if svc, n := h.stored("default", "headless"); svc || n != 0 {
			t.Errorf("headless Service in the store: service %v, %d slices", svc, n)
		}
		mineFirst := mine.waitFor("the first view with --service-proxy-name", func(delivery) bool { return true })
		check(t, "services with --service-proxy-name other-proxy", mineFirst.keys(),
			"default/kubernetes/v4", "default/other/v4", "default/web/v4", "default/web/v6")
		check(t, "other v4 endpoints", mineFirst.endpoints(other4), "10.2.0.1:8080 node-1 ready serving here cluster")
	})
	if t.Failed() {
		t.FailNow()
	}

	hRev, mineRev := h.last().Revision, mine.last().Revision
	o.updateSlice("web-a", func(sl *discoveryv1.EndpointSlice) {
		sl.Endpoints = append(sl.Endpoints, newEndpoint("10.1.0.4", "node-1", "zone-a", ready, "zone-a"))
	})
	h.expectNext("an endpoint added", hRev, func(d delivery) bool { return len(d.endpoints(web4)) == 2 }, "set default/web/v4")
	mine.expectNext("an endpoint added", mineRev, func(d delivery) bool { return len(d.endpoints(web4)) == 2 }, "set default/web/v4")

	// A change kpng does not read is an event, not a revision.
	before := h.store.Stats()
	o.updateService("web", func(s *corev1.Service) { s.Labels = map[string]string{"team": "a"} })
	h.waitUntil("the label change reaches the store", func() bool { return h.store.Stats().Events > before.Events })
	if after := h.store.Stats(); after.Revision != before.Revision {
		t.Errorf("an unread label moved the store revision %d -> %d", before.Revision, after.Revision)
	}

	// The node moves to zone-b: the hints now pick the zone-b endpoint.
	hRev = h.last().Revision
	o.updateNode("node-1", func(n *corev1.Node) { n.Labels[cluster.LabelTopologyZone] = "zone-b" })
	d := h.expectNext("the node's zone changed", hRev, func(d delivery) bool { return d.Node.GetZone() == "zone-b" },
		"set default/web/v4", "node")
	check(t, "web v4 endpoints in zone-b", d.endpoints(web4), "10.1.0.2:8080 node-2 ready serving cluster")

	// The slice of every ready endpoint goes: the terminating endpoint of
	// the other slice is used, so that connections drain.
	hRev = h.last().Revision
	o.deleteSlice("web-a")
	d = h.expectNext("the ready endpoints' slice deleted", hRev, func(d delivery) bool {
		return len(d.endpoints(web4)) == 1 && d.endpoints(web4)[0] != "10.1.0.2:8080 node-2 ready serving cluster"
	},
		"set default/web/v4")
	check(t, "web v4 endpoints while terminating", d.endpoints(web4), "10.1.0.3:8080 node-3 serving terminating cluster")
	hRev = h.last().Revision
	o.deleteSlice("web-b")
	h.expectNext("the last slice deleted", hRev, func(d delivery) bool { return d.Services[web4] != nil && len(d.endpoints(web4)) == 0 },
		"set default/web/v4")

	// Relabelled for another proxy: gone from this proxy's view, and from
	// its store; kept without a flap by the proxy it now belongs to.
	hRev = h.last().Revision
	mine.waitFor("the other proxy's view caught up", func(d delivery) bool { return d.Services[web4] != nil && len(d.endpoints(web4)) == 0 })
	mineBefore := mine.store.Stats()
	mineViews := len(mine.all())
	o.updateService("web", func(s *corev1.Service) { s.Labels[cluster.LabelServiceProxyName] = "other-proxy" })
	h.expectNext("web relabelled for another proxy", hRev, func(d delivery) bool { return d.Services[web4] == nil },
		"deleted default/web/v4", "deleted default/web/v6")
	if svc, _ := h.stored("default", "web"); svc {
		t.Error("a Service relabelled for another proxy is still in the store")
	}
	mine.waitUntil("the relabelling reaches the other proxy's store", func() bool { return mine.store.Stats().Events > mineBefore.Events })
	if n := len(mine.all()); n != mineViews {
		t.Errorf("the proxy web moved to saw %d new views, want none:\n%s", n-mineViews, mine.since(mine.all()[mineViews-1].Revision))
	}

	// A headless Service created now never arrives either: the markers,
	// created after it, prove both watches went past it.
	headless2 := newService("headless2", false, nil)
	headless2.Spec.ClusterIP = corev1.ClusterIPNone
	o.createService(headless2)
	hs2 := newSlice("headless2", "headless2-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.3.0.2", "node-1", "zone-a", ready))
	hs2.Labels[cluster.LabelHeadless] = ""
	o.createSlice(hs2)
	o.createService(newService("marker", false, nil))
	o.createSlice(newSlice("marker", "marker-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.4.0.1", "node-2", "zone-b", ready)))
	h.waitFor("the marker Service and its endpoint", func(d delivery) bool { return len(d.endpoints(key("marker", v4))) == 1 })
	if svc, n := h.stored("default", "headless2"); svc || n != 0 {
		t.Errorf("headless Service in the store: service %v, %d slices", svc, n)
	}

	mineRev = mine.waitFor("the marker", func(d delivery) bool { return len(d.endpoints(key("marker", v4))) == 1 }).Revision
	o.deleteService("web")
	mine.expectNext("web deleted", mineRev, func(d delivery) bool { return d.Services[web4] == nil },
		"deleted default/web/v4", "deleted default/web/v6")
}

func check(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}
