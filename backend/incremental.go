package backend

import (
	"context"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/localv1"
)

// Incremental is a dataplane in the incremental style: it is told each
// service and endpoint that appeared, changed or went away, then Sync.
// Wrap one with FromIncremental to run it.
//
// Endpoints are identified within their service by EndpointKey. Every
// DeleteService is preceded by DeleteEndpoint for each of its endpoints, and
// a SetEndpoint always follows the SetService of its service, so a backend
// can keep simple nested maps.
type Incremental interface {
	// Reset forgets everything: what follows is the whole view.
	Reset()
	SetService(svc *localv1.Service)
	DeleteService(key ServiceKey)
	SetEndpoint(key ServiceKey, ep *localv1.Endpoint)
	DeleteEndpoint(key ServiceKey, ep *localv1.Endpoint)
	// Sync ends a consistent batch: the calls since the last Sync are the
	// change from one view of the node to the next. An error means the
	// batch was not applied: the adapter resets and replays the whole view
	// on its next call.
	Sync() error
}

// EndpointKey identifies an endpoint within its service: the service port it
// serves (name and protocol), its address and its target port (as in
// kube-proxy, one address may serve a port on two port numbers, e.g. during
// a host-network rollout: two endpoints).
type EndpointKey struct {
	PortName string
	Protocol localv1.Protocol
	IP       string
	Port     int32
}

// EndpointKeyOf returns an endpoint's key.
func EndpointKeyOf(ep *localv1.Endpoint) EndpointKey {
	return EndpointKey{PortName: ep.PortName, Protocol: ep.Protocol, IP: ep.Ip, Port: ep.Port}
}

// FromIncremental adapts an incremental backend to the full-state Backend
// that Run drives: for each changed service it sends the service if it
// differs, then exactly the endpoints that appeared, changed or went.
func FromIncremental(inc Incremental) Backend {
	return &incrementalAdapter{inc: inc, sent: map[ServiceKey]*localv1.ServiceEndpoints{}}
}

type incrementalAdapter struct {
	inc  Incremental
	sent map[ServiceKey]*localv1.ServiceEndpoints // what the backend has
}

func (a *incrementalAdapter) Sync(_ context.Context, state *State, changes Changes) error {
	if changes.Reset {
		a.inc.Reset()
		clear(a.sent)
		changes.Set = slices.SortedFunc(func(yield func(ServiceKey) bool) {
			for k := range state.Services {
				if !yield(k) {
					return
				}
			}
		}, ServiceKey.Compare)
		changes.Deleted = nil
	}
	for _, k := range changes.Deleted {
		if old := a.sent[k]; old != nil {
			for _, ep := range old.Endpoints {
				a.inc.DeleteEndpoint(k, ep)
			}
			a.inc.DeleteService(k)
			delete(a.sent, k)
		}
	}
	for _, k := range changes.Set {
		next := state.Services[k]
		if next == nil {
			continue
		}
		a.send(k, a.sent[k], next)
		a.sent[k] = next
	}
	if err := a.inc.Sync(); err != nil {
		// The backend may hold part of the batch: start over next time.
		clear(a.sent)
		return err
	}
	return nil
}

func (a *incrementalAdapter) send(k ServiceKey, prev, next *localv1.ServiceEndpoints) {
	if prev == nil || !proto.Equal(prev.Service, next.Service) {
		a.inc.SetService(next.Service)
	}
	var old map[EndpointKey]*localv1.Endpoint
	if prev != nil {
		old = make(map[EndpointKey]*localv1.Endpoint, len(prev.Endpoints))
		for _, ep := range prev.Endpoints {
			old[EndpointKeyOf(ep)] = ep
		}
	}
	seen := make(map[EndpointKey]bool, len(next.Endpoints))
	for _, ep := range next.Endpoints {
		ek := EndpointKeyOf(ep)
		seen[ek] = true
		if o := old[ek]; o == nil || !proto.Equal(o, ep) {
			a.inc.SetEndpoint(k, ep)
		}
	}
	if prev == nil {
		return
	}
	for _, ep := range prev.Endpoints { // in the entry's (sorted) order
		if !seen[EndpointKeyOf(ep)] {
			a.inc.DeleteEndpoint(k, ep)
		}
	}
}
