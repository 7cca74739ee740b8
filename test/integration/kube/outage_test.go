//go:build integration

package kube

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// While the API server is down the view stays as it was, with no revision
// and a single log line however many retries fail. Meanwhile the cluster
// changes through another API server on the same etcd (as in a control
// plane of several): an endpoint added, a slice and a Service deleted, a
// Service created, the node's zone changed. kpng never saw those events;
// when its API server is back (its watch cache starts after them, so the
// watches cannot resume: kpng relists), the view converges to the new
// state, changing only what changed, and nothing flaps: no service goes
// back to a state it left. Changes made after the restart arrive as usual.
//
// The informers relist independently, as kube-proxy's do, so the view may
// pass through states the cluster never had in that order (gone's
// endpoints removed before gone itself): each such step moves toward the
// final state.
func TestAPIServerOutage(t *testing.T) {
	api := apiserver.Start(t)
	o := objects{t, api.Client}
	o.createNode(newNode("node-1", "zone-a", "192.168.0.1"))
	o.createService(newService("web", true, nil))
	o.createSlice(newSlice("web", "web-4", discoveryv1.AddressTypeIPv4, newEndpoint("10.1.0.1", "node-2", "zone-a", ready)))
	o.createSlice(newSlice("web", "web-6", discoveryv1.AddressTypeIPv6, newEndpoint("fd00:1::1", "node-2", "zone-a", ready)))
	o.createService(newService("gone", false, nil))
	o.createSlice(newSlice("gone", "gone-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.2.0.1", "node-2", "zone-a", ready)))

	h := startSource(t, api, brain.Options{NodeName: "node-1"})
	web4, web6 := key("web", v4), key("web", v6)
	before := h.waitFor("the first view", func(d delivery) bool {
		return len(d.endpoints(web4)) == 1 && len(d.endpoints(key("gone", v4))) == 1
	})
	storeBefore := h.store.Stats()

	api.StopAPIServer()
	h.waitUntil("kpng sees the outage", func() bool { return !h.src.Status().Reachable })

	peer := api.StartPeer()
	p := objects{t, peer.Client}
	p.updateSlice("web-4", func(sl *discoveryv1.EndpointSlice) {
		sl.Endpoints = append(sl.Endpoints, newEndpoint("10.1.0.2", "node-1", "zone-a", ready))
	})
	p.deleteSlice("web-6")
	p.deleteService("gone")
	if err := peer.Client.DiscoveryV1().EndpointSlices("default").Delete(ctx, "gone-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.createService(newService("during", false, nil))
	p.createSlice(newSlice("during", "during-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.3.0.1", "node-1", "zone-a", ready)))
	p.updateNode("node-1", func(n *corev1.Node) { n.Labels[cluster.LabelTopologyZone] = "zone-b" })
	peer.Stop()

	// Enough failed attempts that a log line per retry would show.
	h.waitUntil("several failed requests", func() bool {
		st := h.src.Status()
		return !st.Reachable && st.FailedRequests >= 6
	})
	if got := h.store.Stats().Revision; got != storeBefore.Revision {
		t.Errorf("the store moved during the outage: revision %d -> %d", storeBefore.Revision, got)
	}
	if last := h.last(); last.Revision != before.Revision {
		t.Errorf("the view moved during the outage:\n%s", h.since(before.Revision))
	}
	failed := h.src.Status().FailedRequests

	api.RestartAPIServer()
	relisted := h.waitFor("the changes made during the outage", func(d delivery) bool {
		return len(d.endpoints(web4)) == 2 && d.Services[web6] != nil && len(d.endpoints(web6)) == 0 &&
			d.Services[key("gone", v4)] == nil && len(d.endpoints(key("during", v4))) == 1 && d.Node.GetZone() == "zone-b"
	})
	check(t, "services after the outage", relisted.keys(),
		"default/during/v4", "default/kubernetes/v4", "default/web/v4", "default/web/v6")
	check(t, "web v4 endpoints after the outage", relisted.endpoints(web4),
		"10.1.0.1:8080 node-2 ready serving cluster", "10.1.0.2:8080 node-1 ready serving here cluster")

	// Made after the restart: a Service new, through the watch.
	o.createService(newService("after", false, nil))
	o.createSlice(newSlice("after", "after-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.5.0.1", "node-1", "zone-a", ready)))
	final := h.waitFor("a change made after the restart", func(d delivery) bool { return len(d.endpoints(key("after", v4))) == 1 })
	check(t, "services at the end", final.keys(),
		"default/after/v4", "default/during/v4", "default/kubernetes/v4", "default/web/v4", "default/web/v6")

	// Every view since the outage changed only what was changed.
	allowed := []string{"set default/web/v4", "set default/web/v6", "set default/gone/v4", "deleted default/gone/v4",
		"set default/during/v4", "set default/after/v4", "node"}
	var views []delivery
	for _, d := range h.all() {
		if d.Revision < before.Revision {
			continue
		}
		views = append(views, d)
		if d.Revision == before.Revision {
			continue
		}
		for _, c := range d.changed() {
			if !slices.Contains(allowed, c) {
				t.Errorf("view revision %d after the outage changed %q, which did not change", d.Revision, c)
			}
		}
	}
	// Nothing flapped: no service, and not the node, went back to a state
	// it had left.
	for _, name := range []string{"web/v4", "web/v6", "gone/v4", "during/v4", "after/v4", "kubernetes/v4", "node"} {
		var states []string
		for _, d := range views {
			state := d.Node.String()
			if name != "node" {
				k := key(strings.Split(name, "/")[0], v4)
				if strings.HasSuffix(name, "v6") {
					k.Family = v6
				}
				state = "absent"
				if d.Services[k] != nil {
					state = strings.Join(d.endpoints(k), ", ")
				}
			}
			if n := len(states); n > 0 && states[n-1] == state {
				continue
			}
			if slices.Contains(states, state) {
				t.Errorf("%s flapped: back to [%s] after %q", name, state, states)
			}
			states = append(states, state)
		}
	}
	// Nine writes that change the cluster state (web-4, web-6, gone,
	// gone-1, during, during-1, node-1, after, after-1): nine store
	// revisions, whatever the relist rewrote (a store that deleted and
	// set again what did not change, which a view may hide, would show
	// here), and at most as many views.
	if n := h.store.Stats().Revision - storeBefore.Revision; n != 9 {
		t.Errorf("%d store revisions for 9 changes", n)
	}
	if n := final.Revision - before.Revision; n > 9 {
		t.Errorf("%d view revisions for 9 changes", n)
	}
	if t.Failed() {
		t.Logf("views since the outage:\n%s", h.since(before.Revision))
	}

	// One line for the outage, one for the end of it, whatever the
	// number of failed requests and the restarted server's refusals while
	// it loaded its roles.
	check(t, "logged at the default level (after "+strconv.Itoa(failed)+" failed requests)", h.logged(),
		"INFO Synced with the API server",
		"ERROR Lost contact with the API server; keeping the last state and retrying",
		"INFO Back in contact with the API server")
	if st := h.src.Status(); st.Outages != 1 {
		t.Errorf("outages = %d, want 1", st.Outages)
	}
}
