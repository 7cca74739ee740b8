package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// conn follows whether the API server answers, from every request the
// client makes, and logs only the transitions: one line when contact is
// lost, one when it is back, however many retries come between. client-go
// retries on its own (with backoff) and logs each failed attempt at most at
// -v=4 once kpng replaces its watch error handler, so these two lines are
// what an operator sees of an outage.
type conn struct {
	logger klog.Logger
	now    func() time.Time

	mu       sync.Mutex
	down     bool
	since    time.Time // when contact was lost
	failures int       // failed requests during this outage
	outages  int       // outages so far
}

func newConn(logger klog.Logger) *conn {
	return &conn{logger: logger, now: time.Now}
}

// wrap is a rest.Config transport wrapper that reports every request's
// outcome.
func (c *conn) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		switch {
		case err != nil:
			// A request kpng itself canceled (shutdown, or a watch that
			// client-go ended) says nothing about the server.
			if req.Context().Err() == nil && !errors.Is(err, context.Canceled) {
				c.failed(err)
			}
		case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable ||
			resp.StatusCode == http.StatusGatewayTimeout:
			// A load balancer in front of a dead server, or a server
			// that is not ready yet.
			c.failed(fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status))
		default:
			c.ok()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (c *conn) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures++
	if c.down {
		c.logger.V(4).Info("API server still unreachable", "failedRequests", c.failures, "err", err)
		return
	}
	c.down, c.since, c.outages = true, c.now(), c.outages+1
	c.logger.Error(err, "Lost contact with the API server; keeping the last state and retrying")
}

func (c *conn) ok() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.down {
		return
	}
	c.logger.Info("Back in contact with the API server", "outage", c.now().Sub(c.since).Round(time.Millisecond),
		"failedRequests", c.failures)
	c.down, c.failures = false, 0
}

// isDown reports whether the API server is unreachable right now.
func (c *conn) isDown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down
}

// count returns the number of outages so far.
func (c *conn) count() int {
	_, outages, _ := c.state()
	return outages
}

// state returns whether the server is unreachable, the number of outages,
// and the failed requests of the current one.
func (c *conn) state() (down bool, outages, failures int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down, c.outages, c.failures
}
