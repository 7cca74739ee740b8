package kube

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// An outage is logged once when it starts and once when it ends, however
// many requests fail in between; requests canceled by kpng itself are not
// an outage.
func TestConnLogsAnOutageOnce(t *testing.T) {
	var unavailable atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if unavailable.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	// An address nobody listens on: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	c := newConn(logger)
	client := &http.Client{Transport: c.wrap(http.DefaultTransport)}
	get := func(ctx context.Context, url string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	messages := func() []string {
		var out []string
		for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
			out = append(out, e.Message)
		}
		return out
	}

	get(context.Background(), srv.URL)
	if c.isDown() || len(messages()) != 0 {
		t.Fatalf("after a success: down=%v, logged %q", c.isDown(), messages())
	}

	// A canceled request is not a failure of the server.
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	get(canceled, refused)
	if c.isDown() {
		t.Fatal("a request canceled by the client counted as an outage")
	}

	for range 5 {
		get(context.Background(), refused)
	}
	unavailable.Store(true)
	get(context.Background(), srv.URL) // 503: still down
	if !c.isDown() || c.count() != 1 {
		t.Fatalf("after failures: down=%v outages=%d, want true 1", c.isDown(), c.count())
	}
	unavailable.Store(false)
	get(context.Background(), srv.URL)
	if c.isDown() {
		t.Fatal("still down after a success")
	}
	// A second outage is a second pair of lines.
	get(context.Background(), refused)
	get(context.Background(), srv.URL)

	got := strings.Join(messages(), "\n")
	want := strings.Join([]string{
		"Lost contact with the API server; keeping the last state and retrying",
		"Back in contact with the API server",
		"Lost contact with the API server; keeping the last state and retrying",
		"Back in contact with the API server",
	}, "\n")
	if got != want {
		t.Errorf("logged:\n%s\nwant:\n%s", got, want)
	}
	if c.count() != 2 {
		t.Errorf("outages = %d, want 2", c.count())
	}
}
