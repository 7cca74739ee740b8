package main

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// listen accepts (and closes) connections on loopback, counting them.
func listen(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String(), &n
}

// The probe client measures every target, in the order given, each for
// its share of the time, alternated in rounds (both see the same load).
func TestProbeTargetsAlternates(t *testing.T) {
	a, na := listen(t)
	b, nb := listen(t)
	begin := time.Now()
	res, err := probeTargets([]string{a, b}, 400*time.Millisecond, 4)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < 800*time.Millisecond {
		t.Errorf("probed 2 targets for 400ms each in %v", took)
	}
	if len(res) != 2 || res[0].Target != a || res[1].Target != b {
		t.Fatalf("results %+v, want one per target in order", res)
	}
	for i, n := range []*atomic.Int64{na, nb} {
		r := res[i]
		if r.Connections == 0 || r.P50Micros <= 0 || r.P99Micros < r.P50Micros || r.MeanMicros <= 0 || r.PerSecond <= 0 {
			t.Errorf("%s: %+v", r.Target, r)
		}
		// Every connection the client timed was accepted (the server
		// may still be accepting the last ones).
		deadline := time.Now().Add(5 * time.Second)
		for n.Load() < int64(r.Connections) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n.Load() < int64(r.Connections) {
			t.Errorf("%s: %d connections timed, %d accepted", r.Target, r.Connections, n.Load())
		}
	}
}

// A target that refuses every connection fails the probe, quickly.
func TestProbeTargetsFailsWithoutAConnection(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	if _, err := probeTargets([]string{closed}, 10*time.Second, 1); err == nil {
		t.Error("no error for a target that refuses every connection")
	}
}
