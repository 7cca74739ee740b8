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
//
// An outage starts with a request that got no answer, or an answer from a
// proxy or server that cannot serve (502, 503, 504). It ends with the first
// request, sent after it started, that the server served: a success, or an
// answer a working server gives a valid request (404, 409, 410, ...).
// Answers in between prove nothing: a restarting kube-apiserver answers 403
// (and 401) until its authorizer has loaded the roles, 429 while its
// storage initializes, 500 when its etcd fails; taking those for the end of
// the outage logs several outages for one when a 503 or a refused
// connection follows. They neither start nor end an outage; if they go on
// for refusedGrace, the outage is not one any more but a refusal, logged
// once.
type conn struct {
	logger klog.Logger
	now    func() time.Time

	mu            sync.Mutex
	down          bool
	since         time.Time // when contact was lost
	back          time.Time // when it was last back
	failures      int       // failed requests during this outage
	outages       int       // outages so far
	refusedSince  time.Time // first refusal since the last unanswered request, during an outage
	refusedLogged bool      // the refusal of this outage was logged
}

// refusedGrace is how long the API server may refuse kpng's requests after
// an outage before the refusal is logged: longer than a restarting
// kube-apiserver takes to load its roles and initialize its storage.
const refusedGrace = 30 * time.Second

func newConn(logger klog.Logger) *conn {
	return &conn{logger: logger, now: time.Now}
}

// outcome is what one request says of the API server.
type outcome int

const (
	// served: the server answered the request on its merits.
	served outcome = iota
	// unreachable: no answer, or one saying the server cannot serve.
	unreachable
	// refused: an answer, but not a served request (see conn).
	refused
)

func classify(resp *http.Response, err error) outcome {
	if err != nil {
		return unreachable
	}
	switch code := resp.StatusCode; {
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		// A load balancer in front of a dead server, or a server that
		// is not ready yet.
		return unreachable
	case code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusTooManyRequests || code >= 500:
		return refused
	default:
		return served
	}
}

// wrap is a rest.Config transport wrapper that reports every request's
// outcome.
func (c *conn) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent := c.now()
		resp, err := next.RoundTrip(req)
		// A request kpng itself canceled (shutdown, or a watch that
		// client-go ended) says nothing about the server.
		if err != nil && (req.Context().Err() != nil || errors.Is(err, context.Canceled)) {
			return resp, err
		}
		o, why := classify(resp, err), err
		if why == nil && o != served {
			why = fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status)
		}
		c.report(sent, o, why)
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// report takes the outcome of a request sent at sent.
func (c *conn) report(sent time.Time, o outcome, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch o {
	case unreachable:
		c.failures++
		c.refusedSince = time.Time{}
		if c.down {
			c.logger.V(4).Info("API server still unreachable", "failedRequests", c.failures, "err", err)
			return
		}
		c.down, c.since, c.outages, c.refusedLogged = true, c.now(), c.outages+1, false
		c.logger.Error(err, "Lost contact with the API server; keeping the last state and retrying")
	case refused:
		if !c.down {
			return // not about the connection: the caller reports it
		}
		c.failures++
		now := c.now()
		if c.refusedSince.IsZero() {
			c.refusedSince = now
		}
		if !c.refusedLogged && now.Sub(c.refusedSince) >= refusedGrace {
			c.refusedLogged = true
			c.logger.Error(err, "The API server answers but refuses kpng's requests; keeping the last state and retrying",
				"for", now.Sub(c.refusedSince).Round(time.Second))
			return
		}
		c.logger.V(4).Info("API server answers but refuses", "failedRequests", c.failures, "err", err)
	case served:
		// A request sent before the outage began (a slow list, say)
		// says nothing of the server since.
		if !c.down || sent.Before(c.since) {
			return
		}
		c.logger.Info("Back in contact with the API server", "outage", c.now().Sub(c.since).Round(time.Millisecond),
			"failedRequests", c.failures)
		c.down, c.failures, c.refusedSince, c.back = false, 0, time.Time{}, c.now()
	}
}

// recentlyBack reports whether contact came back less than refusedGrace
// ago: a refusal then (a request the restarted server answered before it
// was quite ready, while another one was served) is part of the outage.
func (c *conn) recentlyBack() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.back.IsZero() && c.now().Sub(c.back) < refusedGrace
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
