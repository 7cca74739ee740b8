//go:build integration

package kube

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/source/kube"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// A node-local source asks the API server for its own Node only (a field
// selector, as kube-proxy's): another Node, and every change to it, never
// reaches its store. A fan-out source (no node name) gets every Node.
func TestNodeLocalSourceGetsOnlyItsNode(t *testing.T) {
	api := apiserver.Start(t)
	o := objects{t, api.Client}
	o.createNode(newNode("node-1", "zone-a", "192.168.0.1"))
	o.createNode(newNode("node-2", "zone-b", "192.168.0.2"))

	local := startSource(t, api, brain.Options{NodeName: "node-1"})
	fanout, fanoutStore := startStore(t, api, "")
	local.waitFor("the first view", func(d delivery) bool { return d.Node.GetName() == "node-1" })
	local.waitUntil("the fan-out source synced", func() bool { return fanout.Status().Synced })
	check(t, "nodes of the node-local source", nodeNames(local.store), "node-1")
	check(t, "nodes of the fan-out source", nodeNames(fanoutStore), "node-1", "node-2")
	before := local.store.Stats()

	// node-2 changes, then node-1: one watch delivers them in that order,
	// so once node-1's change is in, node-2's would have come before it.
	o.updateNode("node-2", func(n *corev1.Node) { n.Labels[cluster.LabelTopologyZone] = "zone-c" })
	o.updateNode("node-1", func(n *corev1.Node) { n.Labels[cluster.LabelTopologyZone] = "zone-b" })
	local.waitFor("node-1's new zone", func(d delivery) bool { return d.Node.GetZone() == "zone-b" })
	check(t, "nodes of the node-local source after the changes", nodeNames(local.store), "node-1")
	if after := local.store.Stats(); after.Events != before.Events+1 {
		t.Errorf("the node-local source got %d events for one change to its Node and one to another", after.Events-before.Events)
	}
	local.waitUntil("both changes in the fan-out source", func() bool {
		zones := map[string]string{}
		fanoutStore.View(func(r cluster.Reader) { r.Nodes(func(n *globalv1.Node) { zones[n.Name] = n.Zone }) })
		return zones["node-1"] == "zone-b" && zones["node-2"] == "zone-c"
	})
}

// startStore runs the kube source for nodeName ("" for every node) into a
// store of its own, as kpng's ServiceAccount, until the test ends.
func startStore(t *testing.T, api *apiserver.Server, nodeName string) (*kube.Source, *cluster.Store) {
	t.Helper()
	config, err := kube.ClientConfig{Kubeconfig: kpngKubeconfig(api), QPS: kube.DefaultQPS, Burst: kube.DefaultBurst,
		ContentType: kube.DefaultContentType}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	src, store := &kube.Source{Config: config, NodeName: nodeName}, cluster.NewStore()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, store) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kube source: %v", err)
		}
	})
	return src, store
}

func nodeNames(store *cluster.Store) []string {
	var out []string
	store.View(func(r cluster.Reader) { r.Nodes(func(n *globalv1.Node) { out = append(out, n.Name) }) })
	slices.Sort(out)
	return out
}
