//go:build integration

package kube

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kpng/kpng/test/integration/apiserver"
)

// BenchmarkKubeStartup times the real `kpng kube ... to-file` (which exits
// after writing its first view) from process start to exit, over a cluster
// preloaded with N Services of 10 endpoints each, and reports the process's
// peak RSS and the store's events and revisions. N comes from
// KPNG_BENCH_SERVICES (comma-separated; default 1000). Run it with
// hack/bench-kube-source.sh, which prints a table.
func BenchmarkKubeStartup(b *testing.B) {
	sizes := os.Getenv("KPNG_BENCH_SERVICES")
	if sizes == "" {
		sizes = "1000"
	}
	bin := buildKpng(b)
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			b.Fatalf("KPNG_BENCH_SERVICES: %v", err)
		}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			api := apiserver.Start(b)
			began := time.Now()
			preload(b, api.Client, n, 10)
			b.Logf("preloaded %d services and their slices in %v", n, time.Since(began).Round(time.Millisecond))
			for _, ct := range []struct{ name, contentType string }{
				{"protobuf", "application/vnd.kubernetes.protobuf"},
				{"json", "application/json"},
			} {
				b.Run(ct.name, func(b *testing.B) {
					runStartup(b, bin, api, ct.contentType, n)
				})
			}
		})
	}
}

var syncedLine = regexp.MustCompile(`Synced with the API server.* events=(\d+) clusterRevision=(\d+)`)

func runStartup(b *testing.B, bin string, api *apiserver.Server, contentType string, n int) {
	out := filepath.Join(b.TempDir(), "view.json")
	var total time.Duration
	var peakKB int64
	var events, revisions float64
	runs := 0
	for b.Loop() {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "-v=2", "kube", "--kubeconfig", api.KubeconfigPath, "--kube-api-content-type", contentType,
			"to-file", "--node-name", "node-1", "--output", out, "--format", "json")
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("kpng: %v\n%s", err, stderr.String())
		}
		total += time.Since(start)
		runs++
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > peakKB {
			peakKB = ru.Maxrss // kilobytes on Linux
		}
		m := syncedLine.FindStringSubmatch(stderr.String())
		if m == nil {
			b.Fatalf("kpng did not log its sync:\n%s", stderr.String())
		}
		events, _ = strconv.ParseFloat(m[1], 64)
		revisions, _ = strconv.ParseFloat(m[2], 64)
		view, err := os.ReadFile(out)
		if err != nil {
			b.Fatal(err)
		}
		// Every preloaded Service is in the view: it is complete.
		if got := bytes.Count(view, []byte(`"name": "svc-`)); got != n {
			b.Fatalf("the first view has %d of the %d services", got, n)
		}
	}
	b.ReportMetric(total.Seconds()/float64(runs), "s/first-view")
	b.ReportMetric(float64(peakKB)/1024, "MB-peak-RSS")
	b.ReportMetric(events, "events")
	b.ReportMetric(revisions, "revisions")
}
