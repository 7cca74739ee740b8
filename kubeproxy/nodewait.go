package kubeproxy

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
)

// DefaultNodeWait is how long kube-proxy 1.36's NodeManager
// (pkg/proxy/node.go) waits for its Node object to exist and have
// addresses before the proxier starts, polling every second; with
// detectLocalMode NodeCIDR it then waits up to five more minutes for pod
// CIDRs (podCIDRWaitTimeout), and exits if none came.
const DefaultNodeWait = 30 * time.Second

// The waits of a Proxy (variables for tests only).
var (
	nodeWaitTimeout    = DefaultNodeWait
	podCIDRWaitTimeout = 5 * time.Minute
)

// NodeWait is how a node-local process waits for its Node object at
// start-up.
type NodeWait struct {
	// Timeout is how long to wait for the Node to exist with addresses
	// (kube-proxy: 30s); 0 does not wait.
	Timeout time.Duration
	// PodCIDRs: then wait up to podCIDRWaitTimeout for its pod CIDRs, and
	// fail without them (kube-proxy's watchPodCIDRs, detectLocalMode
	// NodeCIDR).
	PodCIDRs bool
}

// nodeWaitFeed holds the first view back until this node's Node object is
// known with addresses (and pod CIDRs, when needed), for as long as
// kube-proxy 1.36 waits, then lets it through whatever happened: as
// kube-proxy, kpng programs the Services of a node whose Node object does
// not exist, without a zone (topology hints ignored) and without node IPs,
// and says so in the log and in /healthz (nodeEligible false, nodeStatus).
type nodeWaitFeed struct {
	backend.Feed
	node          string
	needPodCIDRs  bool
	wait, podWait time.Duration
	started       bool
}

// waitForNode wraps feed as w says.
func waitForNode(feed backend.Feed, node string, w NodeWait) *nodeWaitFeed {
	return &nodeWaitFeed{Feed: feed, node: node, needPodCIDRs: w.PodCIDRs, wait: w.Timeout, podWait: podCIDRWaitTimeout}
}

// Next implements backend.Feed.
func (f *nodeWaitFeed) Next(ctx context.Context) (*backend.State, backend.Changes, error) {
	if f.started {
		return f.Feed.Next(ctx)
	}
	f.started = true
	logger := klog.FromContext(ctx).WithValues("node", f.node)
	state, changes, err := f.Feed.Next(ctx)
	if err != nil {
		return state, changes, err
	}
	if hasIPs(state) && (!f.needPodCIDRs || hasPodCIDRs(state)) {
		return state, changes, nil
	}

	waited := false
	if !hasIPs(state) {
		logger.Info("Waiting for this node's Node object to exist and have addresses, as kube-proxy does", "timeout", f.wait)
		if state, err = f.until(ctx, f.wait, state, hasIPs); err != nil {
			return nil, backend.Changes{}, err
		}
		waited = true
	}
	if f.needPodCIDRs && !hasPodCIDRs(state) {
		logger.Info("Waiting for this node's pod CIDRs (detectLocalMode NodeCIDR), as kube-proxy does", "timeout", f.podWait)
		if state, err = f.until(ctx, f.podWait, state, hasPodCIDRs); err != nil {
			return nil, backend.Changes{}, err
		}
		waited = true
		if !hasPodCIDRs(state) {
			if state.Node == nil {
				return nil, backend.Changes{}, fmt.Errorf("timeout waiting for node %q to exist (detectLocalMode NodeCIDR needs its pod CIDRs; kube-proxy 1.36 exits too)", f.node)
			}
			return nil, backend.Changes{}, fmt.Errorf("timeout waiting for PodCIDR allocation on node %q (detectLocalMode NodeCIDR; kube-proxy 1.36 exits too)", f.node)
		}
	}
	switch {
	case state.Node == nil:
		logger.Error(nil, "Timed out waiting for node to exist: no Node object has this name; programming the Services anyway, as kube-proxy 1.36, without a zone (topology hints ignored) and without node IPs; /healthz answers 503 (nodeEligible false) until it exists. Check --hostname-override / --node-name against `kubectl get nodes`")
	case !hasIPs(state):
		logger.Error(nil, "Timed out waiting for node to be assigned IPs; programming the Services anyway, as kube-proxy 1.36")
	}
	if waited {
		// The views the wait consumed are folded into one: start afresh.
		changes = backend.Changes{Reset: true, NodeChanged: true}
	}
	return state, changes, nil
}

// until reads views until ready() or timeout, and returns the latest.
// Only ctx's own end is an error.
func (f *nodeWaitFeed) until(ctx context.Context, timeout time.Duration, state *backend.State, ready func(*backend.State) bool) (*backend.State, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !ready(state) {
		next, _, err := f.Feed.Next(wctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if wctx.Err() != nil {
			return state, nil // the wait ran out
		}
		if err != nil {
			return nil, err
		}
		state = next
	}
	return state, nil
}

func hasIPs(s *backend.State) bool      { return s.Node != nil && len(s.Node.Addresses) > 0 }
func hasPodCIDRs(s *backend.State) bool { return s.Node != nil && len(s.Node.PodCidrs) > 0 }
