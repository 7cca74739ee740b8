package kube

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// What a restarting kube-apiserver answers before it serves kpng (403
// until its authorizer has the roles, 401, 429 while its storage
// initializes, 500) does not end the outage: a 503 or a refused connection
// after it is the same outage, not a second one.
func TestConnOneOutageThroughARestart(t *testing.T) {
	var status atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	c := newConn(logger)
	client := &http.Client{Transport: c.wrap(http.DefaultTransport)}
	get := func(url string, code int) {
		t.Helper()
		status.Store(int32(code))
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
		}
	}
	get(refused, 0)
	for _, code := range []int{http.StatusForbidden, http.StatusUnauthorized, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusForbidden} {
		get(srv.URL, code)
		if !c.isDown() {
			t.Fatalf("a %d during an outage ended it", code)
		}
	}
	get(refused, 0)
	get(srv.URL, http.StatusForbidden)
	get(srv.URL, http.StatusOK)
	if c.isDown() {
		t.Fatal("still down after a success")
	}
	if c.count() != 1 {
		t.Errorf("outages = %d, want 1", c.count())
	}
	check := func(want ...string) {
		t.Helper()
		var got []string
		for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
			got = append(got, e.Message)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	check("Lost contact with the API server; keeping the last state and retrying", "Back in contact with the API server")

	// Refusals while in contact are the callers' to report: no outage.
	for _, code := range []int{http.StatusForbidden, http.StatusTooManyRequests, http.StatusInternalServerError} {
		get(srv.URL, code)
	}
	if c.isDown() || c.count() != 1 {
		t.Errorf("refusals while in contact: down=%v outages=%d, want false 1", c.isDown(), c.count())
	}
	// Answers a working server gives are contact, whatever their status.
	get(refused, 0)
	get(srv.URL, http.StatusNotFound)
	if c.isDown() || c.count() != 2 {
		t.Errorf("a 404 after an outage: down=%v outages=%d, want false 2", c.isDown(), c.count())
	}
}

// An answer to a request sent before the outage began (a slow list) does
// not end it; a refusal that lasts is logged once, when it has lasted
// refusedGrace.
func TestConnOutageClock(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	c := newConn(logger)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	at := func(d time.Duration) time.Time { return now.Add(d) }
	errFor := func(s string) error { return errors.New(s) }

	slowList := at(0)
	now = at(time.Second)
	c.report(now, unreachable, errFor("connection refused"))
	now = at(time.Second)
	c.report(slowList, served, nil)
	if !c.isDown() {
		t.Fatal("the answer to a request sent before the outage ended it")
	}

	for range 3 { // refused for 20s: not logged
		now = at(10 * time.Second)
		c.report(now, refused, errFor("403 Forbidden"))
	}
	now = at(10 * time.Second)
	c.report(now, refused, errFor("403 Forbidden")) // refused for refusedGrace: logged
	now = at(time.Minute)
	c.report(now, refused, errFor("403 Forbidden"))
	now = at(time.Second)
	c.report(now, served, nil)

	var got []string
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		got = append(got, e.Message)
	}
	want := []string{
		"Lost contact with the API server; keeping the last state and retrying",
		"The API server answers but refuses kpng's requests; keeping the last state and retrying",
		"Back in contact with the API server",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A watch error that comes back the same at every retry is logged once,
// and again only after repeatEvery; a different one is logged at once.
func TestRepeatsLogsAPersistentErrorOnce(t *testing.T) {
	var r repeats
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	forbidden := errors.New(`services is forbidden: User "system:serviceaccount:kube-system:kpng" cannot list resource "services"`)
	var got []bool
	for _, step := range []struct {
		after time.Duration
		err   error
	}{
		{0, forbidden}, {30 * time.Second, forbidden}, {30 * time.Second, forbidden},
		{time.Second, errors.New("another")}, {time.Second, forbidden},
		{repeatEvery - time.Second, forbidden}, {time.Second, forbidden},
	} {
		now = now.Add(step.after)
		got = append(got, r.first(step.err, now))
	}
	if want := []bool{true, false, false, true, true, false, true}; !slices.Equal(got, want) {
		t.Errorf("logged %v, want %v", got, want)
	}
}
