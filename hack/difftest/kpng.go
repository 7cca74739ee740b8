package main

import (
	"fmt"
	"strings"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/source/file"
)

// Objects converts the cluster as kpng's sources do (cluster.*FromK8s, what
// `kpng file` and the kube source use). An object the converters refuse is
// an error: the generator only draws objects the API server would accept.
func Objects(c *Cluster) (*file.Objects, error) {
	objs := &file.Objects{}
	for _, n := range c.Nodes {
		o, _, err := cluster.NodeFromK8s(n)
		if err != nil {
			return nil, err
		}
		objs.Nodes = append(objs.Nodes, o)
	}
	for _, s := range c.Services {
		o, _, err := cluster.ServiceFromK8s(s)
		if err != nil {
			return nil, err
		}
		objs.Services = append(objs.Services, o)
	}
	for _, s := range c.Slices {
		o, _, err := cluster.EndpointSliceFromK8s(s)
		if err != nil {
			return nil, err
		}
		objs.EndpointSlices = append(objs.EndpointSlices, o)
	}
	return objs, nil
}

// brainOptions are the brain's options for node under the cluster's gates.
func brainOptions(c *Cluster, node string) brain.Options {
	return brain.Options{NodeName: node, ExternalIPsDisabled: c.Gates.NoExternalIPs}
}

// Kpng is kpng's side, incrementally: a cluster store fed as `kpng file`
// feeds it (each state replaces the previous one in one batch) and one
// brain view per node, each brought up to date after every state.
type Kpng struct {
	src   file.Source
	store *cluster.Store
	views map[string]*brain.View
}

// NewKpng returns kpng's side with views for nodes, under gates.
func NewKpng(c *Cluster) *Kpng {
	k := &Kpng{store: cluster.NewStore(), views: map[string]*brain.View{}}
	for _, n := range c.ViewNodes() {
		k.views[n] = brain.NewView(brainOptions(c, n))
	}
	return k
}

// Apply makes the store hold exactly c, updates every view, and returns
// each view's decisions. A node of c that has no view yet gets one, as a
// proxy starting on it would; a view whose Node is gone stays, as its
// proxy does.
func (k *Kpng) Apply(c *Cluster) (map[string]Result, error) {
	objs, err := Objects(c)
	if err != nil {
		return nil, err
	}
	k.src.Apply(k.store, objs)
	k.store.MarkSynced()
	for _, n := range c.ViewNodes() {
		if k.views[n] == nil {
			k.views[n] = brain.NewView(brainOptions(c, n))
		}
	}
	out := map[string]Result{}
	for n, v := range k.views {
		k.store.View(func(r cluster.Reader) { v.Update(r) })
		out[n] = FromState(v.State())
	}
	return out, nil
}

// KpngWhole computes every node's decisions from scratch.
func KpngWhole(c *Cluster) (map[string]Result, error) {
	return NewKpng(c).Apply(c)
}

// FromState reads a node's decisions out of its view.
func FromState(st *localv1.NodeState) Result {
	out := Result{}
	for _, se := range st.Services {
		s := se.Service
		v6 := s.Family == localv1.IPFamily_IPV6
		for _, p := range s.Ports {
			k := portKey(familyName(v6), s.Namespace, s.Name, p.Name, protocolName(p.Protocol))
			port := Port{
				Service: serviceFacts(s.ClusterIp, int(p.Port), int(p.NodePort), s.ExternalIps, s.LoadBalancerIps, s.LoadBalancerSourceRanges,
					s.ExternalTrafficPolicy == localv1.TrafficPolicy_LOCAL, s.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL,
					int(s.ClientIpAffinitySeconds), int(s.HealthCheckNodePort)),
				HasAny: p.HasEndpoints,
			}
			for _, e := range se.Endpoints {
				if e.PortName != p.Name || e.Protocol != p.Protocol {
					continue
				}
				str := endpointString(e.Ip, int(e.Port), e.OnThisNode, e.Ready, e.Serving, e.Terminating)
				if e.InClusterSet {
					port.Cluster = append(port.Cluster, str)
				}
				if e.InLocalSet {
					port.Local = append(port.Local, str)
				}
			}
			sortedStrings(port.Cluster)
			sortedStrings(port.Local)
			if _, dup := out[k]; dup {
				// Two ports with one name and protocol: the API server
				// refuses such a Service; say so rather than hide it.
				port.Service += fmt.Sprintf(" DUPLICATE(%s)", k)
			}
			out[k] = port
		}
	}
	return out
}

func protocolName(p localv1.Protocol) string {
	return strings.TrimPrefix(p.String(), "PROTOCOL_")
}
