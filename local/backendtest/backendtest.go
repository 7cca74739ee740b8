// Package backendtest helps backend authors test a backend without a
// cluster: build the exact State the brain would hand the backend from a
// file of Kubernetes objects (as kubectl get -o yaml prints them), then call
// Sync and check what the backend did.
//
//	func TestMyBackend(t *testing.T) {
//		st, ch := backendtest.StateFromFile(t, "testdata/cluster.yaml", "node-1")
//		b := mybackend.New(...)
//		if err := b.Sync(context.Background(), st, ch); err != nil {
//			t.Fatal(err)
//		}
//		// assert on the fake dataplane
//	}
//
// For a sequence of changes, use a Cluster: Apply new file contents and call
// Next to get the state and changes a backend would receive.
//
// It lives beside package local, not under package backend: it runs the
// file source, the cluster store and the brain, which the contract itself
// must not depend on.
package backendtest

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
	"github.com/kpng/kpng/source/file"
)

// Cluster is an in-memory cluster with a node's feed over it.
type Cluster struct {
	Store *cluster.Store
	Feed  *local.Feed
	src   file.Source // remembers what the last Apply stored
	first bool
}

// NewCluster returns an empty cluster seen from node. Nothing is delivered
// until the first Apply.
func NewCluster(node string) *Cluster {
	store := cluster.NewStore()
	return &Cluster{Store: store, Feed: local.NewFeed(store, brain.Options{NodeName: node}), first: true}
}

// Apply replaces the cluster's content with the objects in yamlOrJSON, as
// the file source does when its file changes. Problems in the input fail
// the test.
func (c *Cluster) Apply(t testing.TB, yamlOrJSON []byte) {
	t.Helper()
	objs, problems, err := file.Parse(bytes.NewReader(yamlOrJSON))
	if err != nil {
		t.Fatalf("backendtest: %v", err)
	}
	for _, p := range problems {
		t.Errorf("backendtest: input: %s", p)
	}
	c.src.Apply(c.Store, objs)
	c.Store.MarkSynced()
}

// Next returns the state and changes a backend receives next, as the driver
// passes them (the first call has Changes.Reset set). It fails the test if
// nothing changed.
func (c *Cluster) Next(t testing.TB) (*backend.State, backend.Changes) {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), time.Second)
	defer cancel()
	st, ch, err := c.Feed.Next(ctx)
	if err != nil {
		t.Fatalf("backendtest: no new view: %v", err)
	}
	if c.first {
		ch.Reset, c.first = true, false
	}
	return st, ch
}

// StateFromFile returns the state and changes of a backend's first Sync for
// node, from a file of Kubernetes objects.
func StateFromFile(t testing.TB, path, node string) (*backend.State, backend.Changes) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("backendtest: %v", err)
	}
	c := NewCluster(node)
	c.Apply(t, data)
	return c.Next(t)
}
