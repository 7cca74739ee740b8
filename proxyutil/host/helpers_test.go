package host

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/logtest"
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
	t.Run("the metrics server serves /debug/pprof only with --profiling", func(t *testing.T) {
		for _, profiling := range []bool{false, true} {
			// The server's address is logged; the test reads it there.
			ctx, logged := logtest.Lines(context.Background(), 100)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			c := &Config{SyncPeriod: 30 * time.Second, MetricsBindAddress: "127.0.0.1:0", Profiling: profiling, DryRun: true}
			if _, err := StartHelpers(ctx, "nftables", c, v4); err != nil {
				t.Fatal(err)
			}
			var addr string
			for addr == "" {
				select {
				case line := <-logged:
					if m := regexp.MustCompile(`"msg"="Metrics server listening" "address"="([^"]+)"`).FindStringSubmatch(line); m != nil {
						addr = m[1]
					}
				default:
					t.Fatal("the metrics server's address was not logged")
				}
			}
			resp, err := http.Get("http://" + addr + "/debug/pprof/")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[profiling]; resp.StatusCode != want {
				t.Errorf("profiling %v: /debug/pprof/ answered %d, want %d", profiling, resp.StatusCode, want)
			}
		}
	})
}
