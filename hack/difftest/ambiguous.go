package main

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Ambiguous returns the service ports (portKeys) whose endpoints are
// undefined upstream: the same ip:port listed more than once, differently,
// with no single non-terminating entry to win. kube-proxy keeps the last
// non-terminating entry or the first terminating one in map iteration
// order over slices, so its answer varies from run to run; kpng keeps the
// non-terminating entry, else the entry of the slice whose name sorts
// first, first within a slice (brain's mergeSlices). These ports are not
// compared; all others are.
func Ambiguous(c *Cluster) map[string]bool {
	type entry struct {
		terminating bool
		attrs       string
	}
	// by portKey, then ip:port
	seen := map[string]map[string][]entry{}
	for _, sl := range c.Slices {
		if _, headless := sl.Labels[corev1.IsHeadlessService]; headless {
			continue
		}
		var family string
		switch sl.AddressType {
		case discoveryv1.AddressTypeIPv4:
			family = familyName(false)
		case discoveryv1.AddressTypeIPv6:
			family = familyName(true)
		default:
			continue
		}
		svc := sl.Labels[discoveryv1.LabelServiceName]
		for _, p := range sl.Ports {
			if p.Name == nil || p.Port == nil || *p.Port == 0 || p.Protocol == nil {
				continue
			}
			k := portKey(family, sl.Namespace, svc, *p.Name, string(*p.Protocol))
			if seen[k] == nil {
				seen[k] = map[string][]entry{}
			}
			for _, e := range sl.Endpoints {
				if len(e.Addresses) == 0 {
					continue
				}
				addr := fmt.Sprintf("%s:%d", e.Addresses[0], *p.Port)
				seen[k][addr] = append(seen[k][addr], entry{
					terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
					attrs:       endpointAttrs(e),
				})
			}
		}
	}
	out := map[string]bool{}
	for k, byAddr := range seen {
		for _, entries := range byAddr {
			var live, terminating []string
			for _, e := range entries {
				if e.terminating {
					terminating = append(terminating, e.attrs)
				} else {
					live = append(live, e.attrs)
				}
			}
			if distinct(live) > 1 || (len(live) == 0 && distinct(terminating) > 1) {
				out[k] = true
			}
		}
	}
	return out
}

// endpointAttrs is everything of an endpoint a proxy decision reads.
func endpointAttrs(e discoveryv1.Endpoint) string {
	b := func(p *bool) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	node := ""
	if e.NodeName != nil {
		node = *e.NodeName
	}
	var zones, nodes []string
	if e.Hints != nil {
		for _, z := range e.Hints.ForZones {
			zones = append(zones, z.Name)
		}
		for _, n := range e.Hints.ForNodes {
			nodes = append(nodes, n.Name)
		}
	}
	slices.Sort(zones)
	slices.Sort(nodes)
	return strings.Join([]string{b(e.Conditions.Ready), b(e.Conditions.Serving), b(e.Conditions.Terminating), node,
		strings.Join(slices.Compact(zones), ","), strings.Join(slices.Compact(nodes), ",")}, "|")
}

func distinct(s []string) int {
	s = slices.Clone(s)
	slices.Sort(s)
	return len(slices.Compact(s))
}
