//go:build integration

package kube

import (
	"slices"
	"strconv"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// While the API server is down the view stays as it was, with no revision
// and a single log line however many retries fail; when it is back, the
// relist moves nothing that did not change, and the changes made since
// arrive, each as its own revision and nothing else.
func TestAPIServerOutage(t *testing.T) {
	api := apiserver.Start(t)
	o := objects{t, api.Client}
	o.createNode(newNode("node-1", "zone-a", "192.168.0.1"))
	o.createService(newService("web", true, nil))
	o.createSlice(newSlice("web", "web-4", discoveryv1.AddressTypeIPv4, newEndpoint("10.1.0.1", "node-2", "zone-a", ready)))
	o.createSlice(newSlice("web", "web-6", discoveryv1.AddressTypeIPv6, newEndpoint("fd00:1::1", "node-2", "zone-a", ready)))
	o.createService(newService("gone", false, nil))

	h := startSource(t, api, brain.Options{NodeName: "node-1"})
	web4 := key("web", v4)
	before := h.waitFor("the first view", func(d delivery) bool { return len(d.endpoints(web4)) == 1 })
	storeBefore := h.store.Stats()

	api.StopAPIServer()
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
	h.waitUntil("the API server reachable again", func() bool { return h.src.Status().Reachable })

	// Made after the restart: a new endpoint, a Service gone, a Service new.
	o.updateSlice("web-4", func(sl *discoveryv1.EndpointSlice) {
		sl.Endpoints = append(sl.Endpoints, newEndpoint("10.1.0.2", "node-1", "zone-a", ready))
	})
	o.deleteService("gone")
	o.createService(newService("after", false, nil))
	o.createSlice(newSlice("after", "after-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.5.0.1", "node-1", "zone-a", ready)))
	final := h.waitFor("the changes made after the restart", func(d delivery) bool {
		return len(d.endpoints(web4)) == 2 && d.Services[key("gone", v4)] == nil && len(d.endpoints(key("after", v4))) == 1
	})
	check(t, "services after the outage", final.keys(),
		"default/after/v4", "default/kubernetes/v4", "default/web/v4", "default/web/v6")

	// Every view since the outage changed only what was changed: no
	// Service was deleted and re-added, none set that did not change.
	allowed := []string{"set default/web/v4", "deleted default/gone/v4", "set default/after/v4"}
	for _, d := range h.all() {
		if d.Revision <= before.Revision {
			continue
		}
		for _, c := range d.changed() {
			if !slices.Contains(allowed, c) {
				t.Errorf("view revision %d after the outage changed %q, which did not change; views since:\n%s",
					d.Revision, c, h.since(before.Revision))
			}
		}
	}
	if n := final.Revision - before.Revision; n > 4 {
		t.Errorf("%d view revisions for 4 changes:\n%s", n, h.since(before.Revision))
	}

	// One line for the outage, one for the end of it, whatever the
	// number of failed requests.
	check(t, "logged at the default level (after "+strconv.Itoa(failed)+" failed requests)", h.logged(),
		"INFO Synced with the API server",
		"ERROR Lost contact with the API server; keeping the last state and retrying",
		"INFO Back in contact with the API server")
	if st := h.src.Status(); st.Outages != 1 {
		t.Errorf("outages = %d, want 1", st.Outages)
	}
}
