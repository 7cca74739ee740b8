package kubeproxy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// chanFeed delivers the states sent on it, one per Next.
type chanFeed chan *backend.State

func (f chanFeed) Next(ctx context.Context) (*backend.State, backend.Changes, error) {
	select {
	case s := <-f:
		return s, backend.Changes{Set: []backend.ServiceKey{{Namespace: "ns", Name: "svc"}}}, nil
	case <-ctx.Done():
		return nil, backend.Changes{}, ctx.Err()
	}
}

func withNode(n *localv1.Node) *backend.State {
	s := backend.NewState("node-1")
	s.Node = n
	return s
}

var (
	noNode    = withNode(nil)
	nodeNoIPs = withNode(&localv1.Node{Name: "node-1"})
	nodeIPs   = withNode(&localv1.Node{Name: "node-1", Addresses: []string{"192.0.2.1"}})
	nodeFull  = withNode(&localv1.Node{Name: "node-1", Addresses: []string{"192.0.2.1"}, PodCidrs: []string{"10.244.1.0/24"}})
)

// TestNodeWaitAsKubeProxy: the first view waits for the Node as kube-proxy
// 1.36's NodeManager does, and is programmed without it after the wait;
// with pod CIDRs needed (NodeCIDR) their absence is fatal.
func TestNodeWaitAsKubeProxy(t *testing.T) {
	const wait = 200 * time.Millisecond
	for _, tc := range []struct {
		name     string
		podCIDRs bool
		states   []*backend.State // sent one after the other
		want     *backend.State
		waited   bool // the wait ran out
		reset    bool
		err      string
	}{
		{name: "node known with addresses: no wait", states: []*backend.State{nodeIPs}, want: nodeIPs},
		{name: "node appears during the wait", states: []*backend.State{noNode, nodeNoIPs, nodeIPs}, want: nodeIPs, reset: true},
		{name: "no node: programmed without it after the wait", states: []*backend.State{noNode}, want: noNode, waited: true, reset: true},
		{name: "node without addresses: programmed after the wait", states: []*backend.State{nodeNoIPs}, want: nodeNoIPs, waited: true, reset: true},
		{name: "NodeCIDR: pod CIDRs arrive", podCIDRs: true, states: []*backend.State{nodeIPs, nodeFull}, want: nodeFull, reset: true},
		{name: "NodeCIDR: no node is fatal", podCIDRs: true, states: []*backend.State{noNode}, err: `timeout waiting for node "node-1" to exist`},
		{name: "NodeCIDR: no pod CIDRs is fatal", podCIDRs: true, states: []*backend.State{nodeIPs}, err: `timeout waiting for PodCIDR allocation on node "node-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed := make(chanFeed, len(tc.states))
			for _, s := range tc.states {
				feed <- s
			}
			f := waitForNode(feed, "node-1", NodeWait{Timeout: wait, PodCIDRs: tc.podCIDRs})
			f.podWait = wait
			start := time.Now()
			got, ch, err := f.Next(context.Background())
			took := time.Since(start)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("state with node %v, want %v", got.Node, tc.want.Node)
			}
			if ch.Reset != tc.reset {
				t.Errorf("changes %v, want reset %t", ch, tc.reset)
			}
			if ranOut := took >= wait; ranOut != tc.waited {
				t.Errorf("took %s (wait %s): ran out %t, want %t", took, wait, ranOut, tc.waited)
			}
			// Later views pass through.
			feed <- nodeFull
			if got, _, err := f.Next(context.Background()); err != nil || got != nodeFull {
				t.Errorf("after the start: %v, %v", got, err)
			}
		})
	}
}

func TestNodeWaitEndsWithItsContext(t *testing.T) {
	feed := make(chanFeed, 1)
	feed <- noNode
	f := waitForNode(feed, "node-1", NodeWait{Timeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := f.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the context's", err)
	}
}

func TestNodeWaitZeroDoesNotWait(t *testing.T) {
	feed := make(chanFeed, 1)
	feed <- noNode
	start := time.Now()
	if got, _, err := waitForNode(feed, "node-1", NodeWait{}).Next(context.Background()); err != nil || got != noNode {
		t.Fatalf("%v, %v", got, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %s", took)
	}
}
