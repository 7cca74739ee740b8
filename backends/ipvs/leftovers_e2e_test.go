//go:build e2e

package ipvs

import (
	"context"
	"testing"

	"github.com/kpng/kpng/proxyutil/leftovers"
	"github.com/kpng/kpng/test/e2e/netlab"
)

// Removing kube-proxy's leftovers after the first sync, as kpng does,
// keeps what this backend's dataplane is (kube-ipvs0, the virtual
// servers): the backend says so (KeepKubeProxyObjects). Without it, the
// removal clears them.
func TestKubeProxyLeftoversRemovalKeepsThisBackend(t *testing.T) {
	n := startNode1(t, nil)
	web := service("default", "web", "10.96.0.10", withEndpoints(ep(podA, 8080, true)))
	n.sync(web)
	keep := (&Plugin{}).KeepKubeProxyObjects()
	err := n.node.Do(func() error {
		r, err := leftovers.Remove(context.Background(), keep)
		if r.IPVSDummy || r.IPVSServices {
			t.Errorf("the removal, keeping IPVS, removed %+v", r)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := n.node.TCP(ap("10.96.0.10:80")); r.Outcome != netlab.OK || r.Pod != "pod-a" {
		t.Errorf("web after removing kube-proxy's leftovers: %v", r)
	}
	// Without Keep (kpng in another mode replacing kube-proxy's ipvs mode),
	// all of it goes.
	err = n.node.Do(func() error {
		r, err := leftovers.Remove(context.Background())
		if !r.IPVSDummy || !r.IPVSServices {
			t.Errorf("the removal without Keep left some of IPVS: %+v", r)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
