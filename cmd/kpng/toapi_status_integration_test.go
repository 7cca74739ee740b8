//go:build integration

package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpng/kpng/test/integration/apiserver"
)

// TestBrainStatus runs the brain-only process against a real API server
// with a node agent on its globalv1 API, and checks what it reports: the
// gRPC health service SERVING, /healthz and /readyz ok, and on /metrics
// the agent connected, its revision lag back to 0 once it caught up, bytes
// sent, and the watch lag of an EndpointSlice change that carries a
// trigger time.
func TestBrainStatus(t *testing.T) {
	srv := apiserver.Start(t)
	dir := t.TempDir()
	sock, tier := filepath.Join(dir, "brain.sock"), filepath.Join(dir, "tier.sock")
	status := "http://" + freeAddress(t)
	start(t, "kube", "--kubeconfig", srv.KubeconfigPath, "to-api", "--listen", "unix://"+sock,
		"--metrics-bind-address", status[len("http://"):])
	// A node agent: it copies the cluster over globalv1 and serves it on.
	start(t, "api", "--api", "unix://"+sock, "to-api", "--listen", "unix://"+tier)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("gRPC health: %v", err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}

	// The status server is bound before the brain starts; /readyz may
	// still wait for the first complete state.
	eventually(t, ctx, "/healthz and /readyz ok", func() (bool, string) {
		h, hb := get(t, status+"/healthz")
		r, rb := get(t, status+"/readyz")
		return h == http.StatusOK && r == http.StatusOK, hb + rb
	})

	// A change with a trigger time, as the EndpointSlice controller writes.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := srv.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, port, name := true, int32(8080), "http"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.10"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := srv.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	eventually(t, ctx, "the brain's metrics", func() (bool, string) {
		_, m := get(t, status+"/metrics")
		ok := value(m, `kpng_brain_agents_connected{api="globalv1"}`) == 1 &&
			value(m, `kpng_brain_agent_revision_lag{agent="stream-`) == 0 &&
			value(m, `kpng_brain_sent_bytes_total{api="globalv1"}`) > 0 &&
			value(m, `kpng_brain_api_watch_lag_seconds_count`) >= 1 &&
			value(m, `kpng_brain_api_reachable`) == 1 &&
			value(m, `kpng_brain_cluster_revision`) > 1
		return ok, m
	})
}

// eventually polls cond until it holds or ctx ends (then the test fails
// with cond's last detail): what it waits for (a scrape showing a value)
// announces itself nowhere else.
func eventually(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, detail := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the deadline; last:\n%s", what, detail)
		case <-tick.C:
		}
	}
}

// get fetches url, returning its status code and body (0 when it fails).
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// value is the value of the first sample whose line starts with prefix
// (a metric name with the start of its labels), or -1.
func value(exposition, prefix string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + `[^ ]* (\S+)$`)
	m := re.FindStringSubmatch(exposition)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}
