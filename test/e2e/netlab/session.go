package netlab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stream is a long-lived TCP connection to a server (see [Server]): each
// Ping sends a line and reads the server's answer on the same connection, so
// a test can check that an established connection survives, e.g., a proxy
// restart, and still reaches the same server.
type Stream struct {
	host *Host
	dst  netip.AddrPort
	conn net.Conn
	r    *bufio.Reader
}

// OpenStream connects to dst from h and reads the server's greeting, within
// timeout of the test process's running time (see patience). The Result is
// the greeting's; the Stream is nil unless it is OK. Close the Stream when
// done.
func (h *Host) OpenStream(dst netip.AddrPort, timeout time.Duration) (*Stream, Result) {
	start := time.Now()
	p := startPatience(timeout)
	defer p.stop()
	conn, err := h.connect(p.ctx, TCP, dst)
	if err != nil {
		if p.spent() {
			err = fmt.Errorf("%w: %w", os.ErrDeadlineExceeded, err)
		}
		return nil, finish(Result{}, start, fmt.Errorf("tcp %s from %s: %w", dst, h.Name, err))
	}
	s := &Stream{host: h, dst: dst, conn: conn, r: bufio.NewReader(conn)}
	r := s.readWithin(start, p)
	if r.Outcome != OK {
		conn.Close()
		return nil, r
	}
	return s, r
}

// Ping sends one line on the stream and reads the answer, within timeout of
// the test process's running time (see patience).
func (s *Stream) Ping(timeout time.Duration) Result {
	start := time.Now()
	p := startPatience(timeout)
	defer p.stop()
	defer boundBy(p.ctx, s.conn)()
	if _, err := io.WriteString(s.conn, "ping\n"); err != nil {
		return finish(Result{Local: addrPortOf(s.conn.LocalAddr())}, start, fmt.Errorf("tcp %s from %s: send: %w", s.dst, s.host.Name, err))
	}
	return s.readWithin(start, p)
}

func (s *Stream) readWithin(start time.Time, p *patience) Result {
	defer boundBy(p.ctx, s.conn)()
	r := Result{Local: addrPortOf(s.conn.LocalAddr())}
	line, err := s.r.ReadString('\n')
	if err != nil {
		return finish(r, start, fmt.Errorf("tcp %s from %s: read: %w", s.dst, s.host.Name, err))
	}
	return parseAnswer(r, start, line, fmt.Sprintf("tcp %s from %s", s.dst, s.host.Name))
}

// Close closes the connection.
func (s *Stream) Close() error { return s.conn.Close() }

// parseAnswer fills r from a server's answer line "<name> <peer>", which a
// TCP server follows with " retrans=<n>" when its kernel sent the
// handshake's SYN-ACK again n times (see Server): those are added to
// r.Retransmits.
func parseAnswer(r Result, start time.Time, line, what string) Result {
	f := strings.Fields(line)
	var ap netip.AddrPort
	var perr error
	if len(f) >= 2 {
		ap, perr = netip.ParseAddrPort(f[1])
	}
	n, rerr := 0, error(nil)
	if len(f) == 3 {
		n, rerr = parseRetrans(f[2])
	}
	if len(f) < 2 || len(f) > 3 || perr != nil || rerr != nil {
		return finish(r, start, fmt.Errorf("%s: garbled answer %q", what, line))
	}
	r.Outcome, r.Pod, r.Peer, r.Elapsed = OK, f[0], ap, time.Since(start)
	r.Retransmits += n
	return r
}

// parseRetrans parses the "retrans=<n>" of a server's answer.
func parseRetrans(s string) (int, error) {
	v, ok := strings.CutPrefix(s, "retrans=")
	if !ok {
		return 0, fmt.Errorf("not retrans=<n>: %q", s)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not retrans=<n>: %q", s)
	}
	return n, nil
}

// UDPClient is a connected UDP socket that keeps its source port across
// exchanges, as a long-lived UDP client (DNS resolver, RTP stream) does: all
// its datagrams belong to one conntrack entry, which is what a proxy must
// flush when the endpoint it points to goes away.
type UDPClient struct {
	host *Host
	dst  netip.AddrPort
	conn net.Conn
}

// OpenUDP opens a UDP socket in h connected to dst. Close it when done.
func (h *Host) OpenUDP(dst netip.AddrPort) (*UDPClient, error) {
	conn, err := h.connect(context.Background(), UDP, dst)
	if err != nil {
		return nil, fmt.Errorf("udp %s from %s: %w", dst, h.Name, err)
	}
	return &UDPClient{host: h, dst: dst, conn: conn}, nil
}

// Exchange sends one datagram and reads one answer, within timeout of the
// test process's running time (see patience).
func (u *UDPClient) Exchange(timeout time.Duration) Result {
	start := time.Now()
	r := Result{Local: addrPortOf(u.conn.LocalAddr())}
	what := fmt.Sprintf("udp %s from %s", u.dst, u.host.Name)
	p := startPatience(timeout)
	defer p.stop()
	defer boundBy(p.ctx, u.conn)()
	if _, err := u.conn.Write([]byte("netlab\n")); err != nil {
		return finish(r, start, fmt.Errorf("%s: send: %w", what, err))
	}
	buf := make([]byte, 512)
	n, err := u.conn.Read(buf)
	if err != nil {
		return finish(r, start, fmt.Errorf("%s: read: %w", what, err))
	}
	return parseAnswer(r, start, string(buf[:n]), what)
}

// Local is the socket's own address and port.
func (u *UDPClient) Local() netip.AddrPort { return addrPortOf(u.conn.LocalAddr()) }

// Close closes the socket.
func (u *UDPClient) Close() error { return u.conn.Close() }

// HTTPResult is what one HTTP GET observed.
type HTTPResult struct {
	// Outcome classifies the attempt as for Dial: OK once a response came.
	Outcome Outcome
	Status  int
	Body    string
	Err     error
}

func (r HTTPResult) String() string {
	if r.Outcome == OK {
		return fmt.Sprintf("HTTP %d: %s", r.Status, strings.TrimSpace(r.Body))
	}
	return fmt.Sprintf("%s: %v", r.Outcome, r.Err)
}

// HTTPGet sends GET url from h (e.g. to a service's health-check node
// port), on a socket as Dial's, and reads the response, within timeout of
// the test process's running time (see patience). The url's host is an
// address: labs have no names.
func (h *Host) HTTPGet(url string, timeout time.Duration) HTTPResult {
	p := startPatience(timeout)
	defer p.stop()
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dst, err := netip.ParseAddrPort(addr)
			if err != nil {
				return nil, fmt.Errorf("%s from %s: want an address, not a name: %w", addr, h.Name, err)
			}
			return h.connect(ctx, Protocol(strings.TrimRight(network, "46")), dst)
		},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	req, err := http.NewRequestWithContext(p.ctx, http.MethodGet, url, nil)
	if err != nil {
		return HTTPResult{Outcome: Failed, Err: err}
	}
	resp, err := c.Do(req)
	if err != nil {
		if p.spent() {
			err = fmt.Errorf("%w: %w", os.ErrDeadlineExceeded, err)
		}
		return HTTPResult{Outcome: classify(err), Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		if p.spent() {
			err = fmt.Errorf("%w: %w", os.ErrDeadlineExceeded, err)
		}
		return HTTPResult{Outcome: classify(err), Err: err}
	}
	return HTTPResult{Outcome: OK, Status: resp.StatusCode, Body: string(b)}
}
