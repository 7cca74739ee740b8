package main

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// A reduction makes a cluster smaller or plainer, in place, and reports
// whether it changed anything. Reductions name objects by key, not by
// pointer, so one reduction applies to both states of an incremental
// failure.
type reduction func(c *Cluster) bool

// reductions lists the reductions that apply to any of cs.
func reductions(cs ...*Cluster) []reduction {
	var out []reduction
	seen := map[string]bool{}
	once := func(key string) bool {
		if seen[key] {
			return false
		}
		seen[key] = true
		return true
	}
	for _, c := range cs {
		if c == nil {
			continue
		}
		if c.Gates != (Gates{}) && once("gates") {
			out = append(out, func(c *Cluster) bool {
				changed := c.Gates != (Gates{})
				c.Gates = Gates{}
				return changed
			})
		}
		// Whole objects first: they shrink fastest.
		for _, s := range c.Services {
			ns, name := s.Namespace, s.Name
			if once("svc " + ns + "/" + name) {
				out = append(out, func(c *Cluster) bool {
					n := len(c.Services)
					c.Services = slices.DeleteFunc(c.Services, func(s *corev1.Service) bool { return s.Namespace == ns && s.Name == name })
					return len(c.Services) != n
				})
			}
		}
		for _, s := range c.Slices {
			ns, name := s.Namespace, s.Name
			if once("slice " + ns + "/" + name) {
				out = append(out, func(c *Cluster) bool {
					n := len(c.Slices)
					c.Slices = slices.DeleteFunc(c.Slices, func(s *discoveryv1.EndpointSlice) bool { return s.Namespace == ns && s.Name == name })
					return len(c.Slices) != n
				})
			}
		}
		for _, n := range c.Nodes {
			name := n.Name
			if once("node " + name) {
				out = append(out, func(c *Cluster) bool {
					k := len(c.Nodes)
					c.Nodes = slices.DeleteFunc(c.Nodes, func(n *corev1.Node) bool { return n.Name == name })
					return len(c.Nodes) != k
				})
			}
		}
	}
	for _, c := range cs {
		if c == nil {
			continue
		}
		for _, s := range c.Slices {
			ns, name := s.Namespace, s.Name
			onSlice := func(f func(*discoveryv1.EndpointSlice) bool) reduction {
				return func(c *Cluster) bool {
					changed := false
					for _, s := range c.Slices {
						if s.Namespace == ns && s.Name == name {
							changed = f(s) || changed
						}
					}
					return changed
				}
			}
			for j := range s.Endpoints {
				if once("slice " + ns + "/" + name + " endpoint " + strconv.Itoa(j)) {
					out = append(out,
						onSlice(func(s *discoveryv1.EndpointSlice) bool {
							if j >= len(s.Endpoints) {
								return false
							}
							s.Endpoints = slices.Delete(s.Endpoints, j, j+1)
							return true
						}),
						onSlice(func(s *discoveryv1.EndpointSlice) bool {
							if j >= len(s.Endpoints) || (s.Endpoints[j].Hints == nil && s.Endpoints[j].Zone == nil) {
								return false
							}
							s.Endpoints[j].Hints, s.Endpoints[j].Zone = nil, nil
							return true
						}))
				}
			}
			for j := range s.Ports {
				if once("slice " + ns + "/" + name + " port " + strconv.Itoa(j)) {
					out = append(out, onSlice(func(s *discoveryv1.EndpointSlice) bool {
						if j >= len(s.Ports) {
							return false
						}
						s.Ports = slices.Delete(s.Ports, j, j+1)
						return true
					}))
				}
			}
		}
		for _, s := range c.Services {
			ns, name := s.Namespace, s.Name
			onService := func(f func(*corev1.Service) bool) reduction {
				return func(c *Cluster) bool {
					changed := false
					for _, s := range c.Services {
						if s.Namespace == ns && s.Name == name {
							changed = f(s) || changed
						}
					}
					return changed
				}
			}
			if !once("svc fields " + ns + "/" + name) {
				continue
			}
			for j := range s.Spec.Ports {
				out = append(out, onService(func(s *corev1.Service) bool {
					if j >= len(s.Spec.Ports) || len(s.Spec.Ports) == 1 {
						return false
					}
					s.Spec.Ports = slices.Delete(s.Spec.Ports, j, j+1)
					return true
				}))
			}
			out = append(out,
				onService(func(s *corev1.Service) bool {
					changed := len(s.Spec.ExternalIPs) > 0
					s.Spec.ExternalIPs = nil
					if changed && s.Spec.Type == corev1.ServiceTypeClusterIP {
						s.Spec.ExternalTrafficPolicy = "" // no longer externally accessible
					}
					return changed
				}),
				onService(func(s *corev1.Service) bool {
					changed := len(s.Status.LoadBalancer.Ingress) > 0 || len(s.Spec.LoadBalancerSourceRanges) > 0
					s.Status.LoadBalancer.Ingress, s.Spec.LoadBalancerSourceRanges = nil, nil
					return changed
				}),
				onService(func(s *corev1.Service) bool {
					changed := len(s.Labels) > 0
					s.Labels = nil
					return changed
				}),
				onService(func(s *corev1.Service) bool {
					changed := s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP
					s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
					return changed
				}))
		}
	}
	return out
}

// shrink returns a smallest c it can find that still fails.
func shrink(c *Cluster, fails func(*Cluster) bool) *Cluster {
	for progress := true; progress; {
		progress = false
		for _, r := range reductions(c) {
			cand := c.DeepCopy()
			if r(cand) && fails(cand) {
				c, progress = cand, true
			}
		}
	}
	return c
}

// shrinkPair shrinks the two states of an incremental failure, applying
// each reduction to both states, then to the second alone, then to the
// first alone.
func shrinkPair(before, after *Cluster, fails func(before, after *Cluster) bool) (*Cluster, *Cluster) {
	for progress := true; progress; {
		progress = false
		for _, r := range reductions(before, after) {
			for _, which := range []int{2, 1, 0} {
				b, a := before.DeepCopy(), after.DeepCopy()
				changed := false
				if which != 0 {
					changed = r(a) || changed
				}
				if which != 1 {
					changed = r(b) || changed
				}
				if changed && fails(b, a) {
					before, after, progress = b, a, true
					break
				}
			}
		}
	}
	return before, after
}
