package clusterwatch_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/client/clusterwatch"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
)

// Watch hands apply the cluster state a real server serves, a batch at a
// time, and returns apply's error.
func TestWatchDeliversTheClusterAndStopsOnApplyError(t *testing.T) {
	store := cluster.NewStore()
	store.Update(func(tx *cluster.Tx) {
		tx.SetService(&globalv1.Service{Namespace: "ns", Name: "a", Type: globalv1.ServiceType_CLUSTER_IP, ClusterIps: []string{"10.96.0.1"},
			Ports: []*globalv1.ServicePort{{Name: "p", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080}}})
	})
	store.MarkSynced()
	target := "unix://" + filepath.Join(t.TempDir(), "kpng.sock")
	lis, sopts, err := server.Listen(target, server.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.New(store, server.Options{}).Serve(ctx, lis, sopts...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	conn, err := client.Dial(target)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	stop := errors.New("enough")
	var got []clusterwatch.Batch
	err = clusterwatch.Watch(ctx, conn, func(b clusterwatch.Batch) error {
		got = append(got, b)
		return stop
	}, client.WithBackoff(10e6, 100e6))
	if !errors.Is(err, stop) {
		t.Fatalf("Watch returned %v, want apply's error", err)
	}
	if len(got) != 1 || !got[0].Reset || got[0].InstanceID == 0 || got[0].Revision == 0 {
		t.Fatalf("batches %+v, want one reset at a position", got)
	}
	var services []string
	for _, op := range got[0].Ops {
		if s := op.GetSetService(); s != nil {
			services = append(services, s.Namespace+"/"+s.Name)
		}
	}
	if len(services) != 1 || services[0] != "ns/a" {
		t.Errorf("services in the first batch: %q, want ns/a", services)
	}
}
