package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// ProbeResult is what a host-network client on the proxy's node observes
// when it opens TCP connections one after the other for a while: the
// connection-setup rate and the TCP connect time, from connect() to its
// return as the client sees it: its SYN out (the one packet of the
// connection that walks the proxy's NAT rules; conntrack handles the
// others) and the SYN-ACK back. That is a round trip plus the rules'
// cost, not a one-way first-packet latency. (kpng-ebpf rewrites the
// address in connect() itself: the SYN goes to the pod from the start.)
type ProbeResult struct {
	Target      string  `json:"target"`
	Connections int     `json:"connections"`
	Failures    int     `json:"failures"`
	PerSecond   float64 `json:"per_second"`
	P50Micros   float64 `json:"p50_us"`
	// MeanMicros is the mean connect time: it carries the tail the
	// median leaves out (backends/ebpf's TestConnectLatency compares
	// means).
	MeanMicros float64 `json:"mean_us,omitempty"`
	P99Micros  float64 `json:"p99_us"`
	// Cgroup is the client's cgroup v2, as its /proc/self/cgroup said
	// (kpng-ebpf's probe runs in the cgroup its programs attach to).
	Cgroup string `json:"cgroup,omitempty"`
}

// probeCommand, as the bench's first argument, makes it the probe client
// (runProbeClient): a process of its own, so that it can start in a
// cgroup and a network namespace without the bench entering either.
const probeCommand = "probe-client"

// probeRounds is how many times the probe client alternates its targets,
// at least (100 ms each in a 3 s probe): each sees the same machine load, which on
// a shared machine moves more in a few seconds than the few per cent
// compared.
const probeRounds = 30

// probeRoundsFor is how many rounds a probe of d per target makes: at
// least probeRounds, and no round longer than 100 ms, so that a long
// probe (--ebpf-only's) alternates as often as a short one.
func probeRoundsFor(d time.Duration) int {
	return max(probeRounds, int(d/(100*time.Millisecond)))
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

// probe runs the probe client in namespace ns, and in the cgroup v2
// opened as cgroup unless it is nil: the process is created in it
// (CLONE_INTO_CGROUP), so every socket it opens is the cgroup's. The
// client connects to each target for d in all, the targets alternated
// over probeRounds rounds.
func probe(ns string, cgroup *os.File, targets []string, d time.Duration) ([]ProbeResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(targets))*d+time.Minute)
	defer cancel()
	argv := append([]string{"netns", "exec", ns, self, probeCommand, "--for=" + d.String(),
		fmt.Sprintf("--rounds=%d", probeRoundsFor(d))}, targets...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cgroup.Fd())
	}
	// The parent-death signal follows the forking thread.
	runtime.LockOSThread()
	err = cmd.Run()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("probe client in %s: %w: %s", ns, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var out []ProbeResult
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("probe client in %s: %w: %q", ns, err, stdout.String())
	}
	return out, nil
}

// runProbeClient is the probe client's main: it probes the targets of
// args and writes the results to stdout as JSON.
func runProbeClient(args []string) int {
	fs := flag.NewFlagSet(probeCommand, flag.ContinueOnError)
	d := fs.Duration("for", 3*time.Second, "how long each target is probed, in all")
	rounds := fs.Int("rounds", probeRounds, "how many times the targets alternate")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	res, err := probeTargets(fs.Args(), *d, *rounds)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", probeCommand, err)
		return 1
	}
	cg := selfCgroup()
	for i := range res {
		res[i].Cgroup = cg
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", probeCommand, err)
		return 1
	}
	return 0
}

// selfCgroup is this process's cgroup in the v2 hierarchy ("" if none).
func selfCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

// probeTargets connects to each target again and again, one connection at
// a time, each closed with a reset (no TIME_WAIT left to run out of
// ports), for d per target in all: rounds rounds of d/rounds per target,
// in turn (and in reverse order every other round).
func probeTargets(targets []string, d time.Duration, rounds int) ([]ProbeResult, error) {
	if len(targets) == 0 {
		return nil, errors.New("no target")
	}
	rounds = max(rounds, 1)
	lat := make([][]time.Duration, len(targets))
	res := make([]ProbeResult, len(targets))
	spent := make([]time.Duration, len(targets))
	dialer := net.Dialer{Timeout: time.Second}
	slot := d / time.Duration(rounds)
	for r := range rounds {
		for k := range targets {
			i := k
			if r%2 == 1 {
				i = len(targets) - 1 - k
			}
			begin := time.Now()
			for time.Since(begin) < slot {
				start := time.Now()
				c, err := dialer.Dial("tcp4", targets[i])
				if err != nil {
					res[i].Failures++
					if res[i].Failures > 20 && len(lat[i]) == 0 {
						return nil, fmt.Errorf("no connection to %s: %w", targets[i], err)
					}
					continue
				}
				lat[i] = append(lat[i], time.Since(start))
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				c.Close()
			}
			spent[i] += time.Since(begin)
		}
	}
	for i, t := range targets {
		r := &res[i]
		r.Target = t
		if len(lat[i]) == 0 {
			return nil, fmt.Errorf("no connection made to %s", t)
		}
		r.Connections = len(lat[i])
		r.PerSecond = float64(len(lat[i])) / spent[i].Seconds()
		slices.Sort(lat[i])
		r.P50Micros = float64(quantileSorted(lat[i], 0.50).Nanoseconds()) / 1e3
		var sum time.Duration
		for _, l := range lat[i] {
			sum += l
		}
		r.MeanMicros = float64(sum.Nanoseconds()) / 1e3 / float64(len(lat[i]))
		r.P99Micros = float64(quantileSorted(lat[i], 0.99).Nanoseconds()) / 1e3
	}
	return res, nil
}

// quantileSorted returns the q-quantile of sorted samples (nearest rank).
func quantileSorted[T any](sorted []T, q float64) T {
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}
