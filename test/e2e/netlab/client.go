package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// DefaultTimeout bounds one client attempt. A dropped packet is reported as
// [TimedOut] after this long, so it is kept short to keep suites fast; every
// link in a lab is a veth, where an answer takes well under a millisecond.
const DefaultTimeout = time.Second

// Protocol is a transport protocol a client can speak.
type Protocol string

// The protocols clients speak.
const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Outcome classifies what a client observed.
type Outcome int

const (
	// OK: a server answered.
	OK Outcome = iota
	// Refused: something actively said no. For TCP a RST (ECONNREFUSED); for
	// TCP and UDP an ICMP port unreachable (ECONNREFUSED), or an ICMP
	// administratively prohibited / host unreachable as sent by a firewall
	// reject (EHOSTUNREACH for IPv4, EACCES for IPv6). These arrive within the
	// timeout, so they cannot be confused with a drop.
	Refused
	// TimedOut: no answer at all within the timeout, i.e. the request or the
	// answer was dropped; for [Host.Probe], also an answer that came only
	// after a packet of the TCP handshake was sent again (see
	// Result.Retransmits): a drop, which the retransmission outlived.
	TimedOut
	// Failed: anything else (no route, a garbled answer, ...); see Result.Err.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case TimedOut:
		return "timed out"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is what one client attempt observed.
type Result struct {
	// Outcome classifies the attempt.
	Outcome Outcome
	// Pod is the name of the server that answered (a pod's name, or a node's
	// for a server on a node), when Outcome is OK.
	Pod string
	// Peer is the client address and port as the server saw them, when
	// Outcome is OK: the client's own address, or a masqueraded one.
	Peer netip.AddrPort
	// Local is the client socket's own address and port.
	Local netip.AddrPort
	// Err is the underlying error, for every Outcome but OK.
	Err error
	// Elapsed is how long the attempt took.
	Elapsed time.Duration
	// Retransmits counts, for TCP, the handshake packets sent again: the
	// client's SYNs (as its kernel counted them when the connect ended,
	// whatever the outcome) and the server's SYN-ACKs (as the server's
	// kernel counted them, reported in its answer). A handshake packet is
	// sent again only when the one before got no answer for a second or
	// more: it is the kernel's record of a drop, which no stall of the
	// test process can fake.
	Retransmits int
}

func (r Result) String() string {
	if r.Outcome == OK {
		return fmt.Sprintf("ok: %s saw %s", r.Pod, r.Peer)
	}
	return fmt.Sprintf("%s after %v: %v", r.Outcome, r.Elapsed.Round(time.Millisecond), r.Err)
}

// TCP connects to dst from h, with [DefaultTimeout], and reads the answer.
func (h *Host) TCP(dst netip.AddrPort) Result {
	return h.Dial(TCP, dst, DefaultTimeout)
}

// UDP sends one datagram to dst from h, with [DefaultTimeout], and reads the
// answer.
func (h *Host) UDP(dst netip.AddrPort) Result {
	return h.Dial(UDP, dst, DefaultTimeout)
}

// Dial makes one attempt from h (a socket of h's namespace, and of h's
// cgroup in a lab with cgroups): for TCP, connect and read
// the server's line; for UDP, send one datagram from a connected socket (so an
// ICMP error is reported to it) and read the answer. Each attempt uses a new
// ephemeral source port, hence a new conntrack entry. The whole attempt,
// connect and read, is bounded by timeout.
func (h *Host) Dial(proto Protocol, dst netip.AddrPort, timeout time.Duration) Result {
	return h.DialFrom(proto, 0, dst, timeout)
}

// DialFrom is Dial from source port port (0: an ephemeral one, as Dial).
// A second attempt from the same port reuses the first's conntrack tuple,
// as a client whose handshake is sent again does, or one whose new socket
// drew the same port.
func (h *Host) DialFrom(proto Protocol, port uint16, dst netip.AddrPort, timeout time.Duration) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return h.dial(ctx, start, proto, port, dst)
}

// dial is DialFrom, bounded by ctx: its end, a deadline or a cancellation,
// ends the attempt (connect, send and read). Result.Elapsed counts from
// start, taken before ctx's deadline was set: a goroutine descheduled
// between the two would otherwise see a timeout come "early" by as long
// as it stood still (a drop timed out after 888 ms of a 1 s timeout, at
// load 12).
func (h *Host) dial(ctx context.Context, start time.Time, proto Protocol, port uint16, dst netip.AddrPort) Result {
	var r Result
	conn, ci, err := h.connectCounted(ctx, proto, port, dst)
	r.Retransmits = ci.retrans
	if err != nil {
		// The socket's address and its retransmissions: the tuple to look
		// for in the nodes' conntrack tables (Lab.Dump), and how many
		// handshake packets went unanswered.
		r.Local = ci.local
		var what []string
		if ci.local.IsValid() {
			what = append(what, ci.local.String())
			if proto == TCP {
				what = append(what, fmt.Sprintf("%d SYN(s) sent again", ci.retrans))
			}
		}
		if ci.began.IsZero() {
			what = append(what, "no socket made")
		} else {
			what = append(what, fmt.Sprintf("socket made %v after the start", ci.began.Sub(start).Round(time.Millisecond)))
		}
		r.Err = fmt.Errorf("%s %s from %s (%s): %w", proto, dst, h.Name, strings.Join(what, ", "), err)
		r.Outcome = classify(err)
		r.Elapsed = time.Since(start)
		return r
	}
	defer conn.Close()
	r.Local = addrPortOf(conn.LocalAddr())
	defer boundBy(ctx, conn)()
	var sendErr error
	if proto == UDP {
		if _, err := conn.Write([]byte("netlab\n")); err != nil {
			if !errors.Is(err, syscall.EPERM) {
				return finish(r, start, fmt.Errorf("%s %s from %s: send: %w", proto, dst, h.Name, err))
			}
			// The node's own OUTPUT hook dropped the datagram (a drop, or a
			// reject, which also queues an ICMP error to this socket):
			// reading tells which.
			sendErr = err
		}
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && line == "" {
			err = fmt.Errorf("connection closed without an answer: %w", err)
		}
		if sendErr != nil {
			err = fmt.Errorf("%w (after send: %v)", err, sendErr)
		}
		return finish(r, start, fmt.Errorf("%s %s from %s: read: %w", proto, dst, h.Name, err))
	}
	return parseAnswer(r, start, line, fmt.Sprintf("%s %s from %s", proto, dst, h.Name))
}

// ProbePatience is how long [Host.Probe] waits for an answer, in time the
// test process ran (see patience).
const ProbePatience = 5 * time.Second

// Probe makes one attempt from h as Dial does, for the traffic a test keeps
// running while it disturbs a proxy (a restart, a fault, churn), and judges
// it by what the kernel recorded rather than by the test process's clock.
// On a machine loaded beyond its cores the test process, which sends the
// probes and runs the servers that answer them, may stand still for
// seconds; a probe timed by its clock would then fail although every
// packet went through. So a probe waits up to [ProbePatience] for its
// answer, and fails if
//
//   - it was refused, or failed, as for Dial;
//   - no answer came while the test process ran for ProbePatience (time it
//     stood still does not count: see patience): the request or the answer
//     was dropped (UDP
//     has no retransmission, so a datagram dropped once is never answered;
//     TCP retransmits, and a SYN dropped on every try is never answered);
//   - for TCP, an answer came, but only after a packet of the handshake was
//     sent again (Result.Retransmits): the first was dropped. Its Outcome is
//     then TimedOut, as it was when probes were timed.
//
// A dataplane that drops a probe for less than the kernel's first
// retransmission timeout (one second for a SYN) is caught as before; only
// the test process's own delays no longer count.
func (h *Host) Probe(proto Protocol, dst netip.AddrPort) Result {
	return h.probe(proto, dst, ProbePatience)
}

func (h *Host) probe(proto Protocol, dst netip.AddrPort, wait time.Duration) Result {
	start := time.Now()
	p := startPatience(wait)
	r := h.dial(p.ctx, start, proto, 0, dst)
	p.stop()
	if r.Outcome != OK && p.spent() {
		// Ended by the patience's cancellation, which the dialer reports
		// as a cancellation: it is a timeout.
		r.Outcome = TimedOut
		r.Err = fmt.Errorf("no answer while the test process ran for %v (%v in all): %w", wait, r.Elapsed.Round(time.Millisecond), r.Err)
	}
	if r.Outcome == OK && r.Retransmits > 0 {
		r.Outcome = TimedOut
		r.Err = fmt.Errorf("%s %s from %s: answered by %s after %v, but only after %d handshake packet(s) were sent again: a drop",
			proto, dst, h.Name, r.Pod, r.Elapsed.Round(time.Millisecond), r.Retransmits)
	}
	return r
}

// patienceTick is the period at which a patience counts the time the test
// process runs.
const patienceTick = 20 * time.Millisecond

// patienceWallCap bounds a patience in wall time, however long the test
// process stands still.
const patienceWallCap = time.Minute

// patience is a wait bounded in the time the test process ran rather than
// in wall time: on a machine loaded beyond its cores the process may stand
// still for seconds, during which no answer can be read, and that time is
// not the dataplane's. A goroutine ticks every patienceTick and counts a
// tick's worth of running time per tick, however late the tick came (a
// late tick is the process standing still); once it counted the whole
// wait, it cancels ctx.
type patience struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	ended  atomic.Bool
}

func startPatience(wait time.Duration) *patience {
	ctx, cancel := context.WithTimeout(context.Background(), patienceWallCap)
	p := &patience{ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(patienceTick)
		defer tick.Stop()
		last, ran := time.Now(), time.Duration(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := time.Now()
			ran += min(now.Sub(last), 2*patienceTick)
			last = now
			if ran >= wait {
				p.ended.Store(true)
				cancel()
				return
			}
		}
	}()
	return p
}

// spent reports whether the wait ended because the process ran for all of
// it (or the wall cap passed).
func (p *patience) spent() bool {
	return p.ended.Load() || errors.Is(p.ctx.Err(), context.DeadlineExceeded)
}

// stop ends the patience's goroutine.
func (p *patience) stop() {
	p.cancel()
	<-p.done
}

// boundBy bounds conn's reads and writes by ctx: they end as at a deadline
// (os.ErrDeadlineExceeded, a timeout) at ctx's deadline, or once ctx is
// cancelled (a patience spent). It returns the function that undoes the
// cancellation's part.
func boundBy(ctx context.Context, conn net.Conn) func() {
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return func() { stop() }
}

// recvErr sets IP_RECVERR / IPV6_RECVERR on a client socket. Without it, an
// ICMP error that arrives while connect(2) still holds the socket (as happens
// on veth, where the whole round trip runs in the sender's softirq) is only
// recorded as a soft error, and TCP reports it at the next SYN retransmission,
// a second later: a reject would look like a timeout. With it, the error is
// also queued on the socket's error queue, which wakes the poller at once and
// connect returns the error.
func recvErr(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if strings.HasSuffix(network, "6") {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_RECVERR, 1)
		} else {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_RECVERR, 1)
		}
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set RECVERR: %w", serr)
	}
	return nil
}

func finish(r Result, start time.Time, err error) Result {
	r.Err, r.Outcome, r.Elapsed = err, classify(err), time.Since(start)
	return r
}

// classify maps a client error to an Outcome; see the Outcome constants.
func classify(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return TimedOut
	case errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.EACCES):
		return Refused
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return TimedOut
	}
	return Failed
}

func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// Spread calls dial n times and counts the answers by the name of the server
// that answered. Attempts that got no answer are counted under their outcome
// in angle brackets, e.g. "<timed out>", so a test can assert both the
// distribution and that nothing failed:
//
//	got := netlab.Spread(100, func() netlab.Result { return client.TCP(vip) })
//	// got == map[string]int{"pod-a": 52, "pod-b": 48}
func Spread(n int, dial func() Result) map[string]int {
	got := map[string]int{}
	for range n {
		r := dial()
		if r.Outcome == OK {
			got[r.Pod]++
		} else {
			got["<"+r.Outcome.String()+">"]++
		}
	}
	return got
}

// FormatSpread prints a Spread result in a stable order, for messages.
func FormatSpread(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// Eventually calls dial until ok accepts its result, and returns that result;
// if within elapses first, it fails the test with the last result. Use it to
// wait for a proxy to program a change: there is no event to wait on, so
// polling what a client observes is the honest condition.
func Eventually(t testing.TB, within time.Duration, dial func() Result, ok func(Result) bool) Result {
	t.Helper()
	end := time.Now().Add(within)
	for {
		r := dial()
		if ok(r) {
			return r
		}
		if time.Now().After(end) {
			t.Fatalf("condition not met within %v; last result: %v", within, r)
		}
		time.Sleep(50 * time.Millisecond) // pacing between attempts, not a wait for a condition
	}
}

// Answered returns a predicate for Eventually: the answer came from one of
// pods (any server, if none is given).
func Answered(pods ...string) func(Result) bool {
	return func(r Result) bool {
		if r.Outcome != OK {
			return false
		}
		if len(pods) == 0 {
			return true
		}
		for _, p := range pods {
			if r.Pod == p {
				return true
			}
		}
		return false
	}
}

// Is returns a predicate for Eventually: the attempt ended with outcome o.
func Is(o Outcome) func(Result) bool {
	return func(r Result) bool { return r.Outcome == o }
}
