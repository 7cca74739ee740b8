package host

import (
	"context"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

func TestStartHelpers(t *testing.T) {
	v4 := []localv1.IPFamily{localv1.IPFamily_IPV4}
	t.Run("driver options feed the helpers, with the sync periods", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &Config{MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second, HealthzBindAddress: "127.0.0.1:0", DryRun: true}
		opts, err := StartHelpers(ctx, "nftables", c, v4)
		if err != nil {
			t.Fatal(err)
		}
		if opts.MinSyncPeriod != time.Second || opts.ResyncPeriod != 30*time.Second || opts.OnQueued == nil || opts.OnSync == nil {
			t.Fatalf("options %+v", opts)
		}
		st := backend.NewState("n1")
		opts.OnQueued(st, backend.Changes{Reset: true})
		opts.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Reset: true}, Full: true, Start: time.Now()})
	})
	t.Run("a health address that cannot be listened on is an error", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := &Config{SyncPeriod: 30 * time.Second, HealthzBindAddress: "127.0.0.1:-1", DryRun: true}
		if _, err := StartHelpers(ctx, "nftables", c, v4); err == nil {
			t.Fatal("no error")
		}
	})
}
