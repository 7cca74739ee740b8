package brain

import (
	"slices"

	"github.com/kpng/kpng/api/localv1"
)

// endpoint is an endpoint of one service port while the brain categorizes
// it: the model's Endpoint plus the topology hints, which backends never see.
type endpoint struct {
	*localv1.Endpoint
	zoneHints []string
	nodeHints []string
}

// portPolicy says which endpoint sets traffic to a service port can reach
// (upstream's UsesClusterEndpoints / UsesLocalEndpoints).
type portPolicy struct {
	usesCluster bool
	usesLocal   bool
}

type topologyMode int

const (
	topologyNone topologyMode = iota
	topologySameNode
	topologySameZone
)

// categorize marks each endpoint's membership of the cluster set and the
// local set, and reports whether the port has any usable endpoint anywhere.
// It is upstream's CategorizeEndpoints: the sets it returns are the endpoints
// marked here, and its allReachableEndpoints is their union.
func categorize(eps []endpoint, policy portPolicy, node Node) (hasAny bool) {
	if len(eps) == 0 {
		return false
	}
	if policy.usesCluster {
		mode := topologyFromHints(eps, node)
		n := 0
		for _, e := range eps {
			if e.Ready && availableForTopology(e, mode, node) {
				e.InClusterSet = true
				n++
			}
		}
		if n == 0 {
			// No ready endpoint: fall back to serving terminating ones, so
			// that connections drain instead of failing. Topology is not
			// applied to the fallback.
			for _, e := range eps {
				if (e.Serving || mutated("fallback-ignores-serving")) && e.Terminating {
					e.InClusterSet = true
					n++
				}
			}
		}
		hasAny = n > 0
	}
	if !policy.usesLocal {
		return hasAny
	}

	var localReady, localServingTerminating bool
	for _, e := range eps {
		switch {
		case e.Ready:
			hasAny = true
			localReady = localReady || e.OnThisNode
		case e.Serving && e.Terminating:
			hasAny = true
			localServingTerminating = localServingTerminating || e.OnThisNode
		}
	}
	for _, e := range eps {
		switch {
		case !e.OnThisNode:
		case localReady && mutated("local-set-serving-not-ready"):
			e.InLocalSet = e.Serving
		case localReady:
			e.InLocalSet = e.Ready
		case localServingTerminating:
			e.InLocalSet = e.Serving && e.Terminating
		}
	}
	return hasAny
}

// topologyFromHints decides whether hints apply: only when every ready
// endpoint carries hints of a kind and at least one names this node (or its
// zone). Node hints take precedence over zone hints.
func topologyFromHints(eps []endpoint, node Node) topologyMode {
	hasReady := false
	allNodeHints, forThisNode := true, false
	allZoneHints, forThisZone := true, false
	for _, e := range eps {
		if !e.Ready {
			continue
		}
		hasReady = true
		if len(e.nodeHints) == 0 {
			allNodeHints = false
		} else if slices.Contains(e.nodeHints, node.Name) {
			forThisNode = true
		}
		if len(e.zoneHints) == 0 {
			allZoneHints = false
		} else if slices.Contains(e.zoneHints, node.Zone) {
			forThisZone = true
		}
	}
	switch {
	case !hasReady:
		return topologyNone
	case allNodeHints && forThisNode && !mutated("node-hints-ignored"):
		return topologySameNode
	case (allZoneHints || mutated("zone-hints-partial")) && forThisZone:
		return topologySameZone
	}
	return topologyNone
}

func availableForTopology(e endpoint, mode topologyMode, node Node) bool {
	switch mode {
	case topologySameNode:
		return slices.Contains(e.nodeHints, node.Name)
	case topologySameZone:
		return slices.Contains(e.zoneHints, node.Zone)
	}
	return true
}
