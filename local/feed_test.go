package local

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	globalv1 "github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
)

// A cluster change that leaves the node's view as it was is said too, with
// the cluster revision, so that a writer of the cluster state can tell it is
// in the dataplane (test/e2e/netlab's KpngApplied).
func TestFeedSaysUnchangedView(t *testing.T) {
	lines := make(chan string, 100)
	logger := funcr.New(func(prefix, args string) { lines <- args }, funcr.Options{Verbosity: 2})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()

	store := cluster.NewStore()
	store.Update(func(tx *cluster.Tx) { tx.SetNode(&globalv1.Node{Name: "node-1", Addresses: []string{"192.168.0.1"}}) })
	store.MarkSynced()
	f := NewFeed(store, brain.Options{NodeName: "node-1"})
	st, _, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	view := st.Revision

	// Another node's address is not in node-1's view.
	rev := store.Update(func(tx *cluster.Tx) { tx.SetNode(&globalv1.Node{Name: "node-2", Addresses: []string{"192.168.0.2"}}) })
	want := fmt.Sprintf(`"msg"="Node view unchanged" "clusterRevision"=%d "viewRevision"=%d`, rev, view)
	done := make(chan error, 1)
	go func() { _, _, err := f.Next(ctx); done <- err }()
	for said := false; !said; {
		select {
		case l := <-lines:
			said = strings.Contains(l, want)
		case err := <-done:
			t.Fatalf("Next returned (%v) for a change that left the view as it was", err)
		}
	}
	cancel()
	<-done
}
