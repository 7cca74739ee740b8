package main

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// ProbeResult is what a host-network client on the proxy's node observes
// when it opens TCP connections one after the other for a while: the
// connection-setup rate and the TCP connect time, from connect() to its
// return as the client sees it: its SYN out (the one packet of the
// connection that walks the proxy's NAT rules; conntrack handles the
// others) and the SYN-ACK back. That is a round trip plus the rules'
// cost, not a one-way first-packet latency.
type ProbeResult struct {
	Target      string  `json:"target"`
	Connections int     `json:"connections"`
	Failures    int     `json:"failures"`
	PerSecond   float64 `json:"per_second"`
	P50Micros   float64 `json:"p50_us"`
	P99Micros   float64 `json:"p99_us"`
}

// servePod listens on the probe pod's address in namespace ns and accepts
// (and closes) connections until the listener is closed.
func servePod(ns string) (net.Listener, error) {
	var l net.Listener
	err := (&netnstest.Netns{Name: ns}).Do(func() error {
		var err error
		l, err = net.Listen("tcp4", net.JoinHostPort(probePodIP, fmt.Sprint(endpointPort)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pod server in %s: %w", ns, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l, nil
}

// probe connects from namespace ns to target again and again for d, one
// connection at a time, each closed with a reset (no TIME_WAIT left to
// run out of ports).
func probe(ns, target string, d time.Duration) (ProbeResult, error) {
	r := ProbeResult{Target: target}
	var lat []time.Duration
	err := (&netnstest.Netns{Name: ns}).Do(func() error {
		dialer := net.Dialer{Timeout: time.Second}
		begin := time.Now()
		for time.Since(begin) < d {
			start := time.Now()
			c, err := dialer.Dial("tcp4", target)
			if err != nil {
				r.Failures++
				if r.Failures > 20 && len(lat) == 0 {
					return fmt.Errorf("no connection to %s: %w", target, err)
				}
				continue
			}
			lat = append(lat, time.Since(start))
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
		}
		r.PerSecond = float64(len(lat)) / time.Since(begin).Seconds()
		return nil
	})
	if err != nil {
		return r, err
	}
	if len(lat) == 0 {
		return r, errors.New("no connection made")
	}
	r.Connections = len(lat)
	slices.Sort(lat)
	r.P50Micros = float64(quantileSorted(lat, 0.50).Nanoseconds()) / 1e3
	r.P99Micros = float64(quantileSorted(lat, 0.99).Nanoseconds()) / 1e3
	return r, nil
}

// quantileSorted returns the q-quantile of sorted samples (nearest rank).
func quantileSorted[T any](sorted []T, q float64) T {
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}
