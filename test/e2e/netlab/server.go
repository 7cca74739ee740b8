package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Server is the echo server of a pod (or of any [Host]). On every address of
// its host and every port it serves, it answers each TCP connection and each
// UDP datagram with one line, "<name> <peer>", where peer is the source
// address and port it saw, e.g. "pod-a 10.244.1.1:41234"; a TCP connection
// stays open, and gets the line again for each line the client sends, until
// the client closes it. That is what tests
// assert on: who answered, and whether the client's address was preserved or
// masqueraded.
//
// The sockets are created inside the host's namespace but served by goroutines
// of the test process: no binary to build, no process to supervise, and the
// listen(2) call has returned before Listen does. Listen still proves each
// port by a real round trip from inside the namespace before returning.
type Server struct {
	host *Host

	mu    sync.Mutex
	ports map[int]*portListeners
}

type portListeners struct {
	tcp []net.Listener
	udp []net.PacketConn
	wg  sync.WaitGroup // serving goroutines, including per-connection ones

	mu    sync.Mutex
	conns map[net.Conn]bool // open TCP connections, closed by close
}

func newServer(h *Host) *Server {
	return &Server{host: h, ports: map[int]*portListeners{}}
}

// Ports returns the ports currently served.
func (s *Server) Ports() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ps []int
	for p := range s.ports {
		ps = append(ps, p)
	}
	return ps
}

// Listen starts serving TCP and UDP on port, on each of the host's addresses,
// and returns once a TCP connection and a UDP datagram to every one of them,
// sent from inside the host's namespace, have been answered. Listening on a
// port already served is a no-op.
func (s *Server) Listen(port int) error {
	s.mu.Lock()
	if _, ok := s.ports[port]; ok {
		s.mu.Unlock()
		return nil
	}
	pl := &portListeners{}
	s.ports[port] = pl
	s.mu.Unlock()

	err := s.host.Do(func() error {
		var lc net.ListenConfig
		for _, a := range s.host.Addrs() {
			ap := netip.AddrPortFrom(a, uint16(port)).String()
			tl, err := lc.Listen(context.Background(), tcpNet(a), ap)
			if err != nil {
				return fmt.Errorf("server %s: listen tcp %s: %w", s.host.Name, ap, err)
			}
			pl.tcp = append(pl.tcp, tl)
			ul, err := lc.ListenPacket(context.Background(), udpNet(a), ap)
			if err != nil {
				return fmt.Errorf("server %s: listen udp %s: %w", s.host.Name, ap, err)
			}
			pl.udp = append(pl.udp, ul)
		}
		return nil
	})
	for _, l := range pl.tcp {
		pl.wg.Add(1)
		go s.serveTCP(pl, l)
	}
	for _, c := range pl.udp {
		pl.wg.Add(1)
		go s.serveUDP(pl, c)
	}
	if err == nil {
		err = s.ready(port)
	}
	if err != nil {
		s.ClosePort(port)
		return err
	}
	return nil
}

// readyWithin bounds the readiness check. One attempt takes well under a
// millisecond, but on a loaded machine (CI, two cores shared with other
// tests) starting the namespace thread alone can take longer than one
// client timeout, so the check retries.
const readyWithin = 15 * time.Second

// ready connects to every address:port from the host itself and checks the
// answer names this server.
func (s *Server) ready(port int) error {
	end := time.Now().Add(readyWithin)
	for _, a := range s.host.Addrs() {
		dst := netip.AddrPortFrom(a, uint16(port))
		for _, proto := range []Protocol{TCP, UDP} {
			for {
				r := s.host.Dial(proto, dst, DefaultTimeout)
				if r.Outcome == OK && r.Pod == s.host.Name {
					break
				}
				if time.Now().After(end) {
					return fmt.Errorf("server %s: readiness check: %v", s.host.Name, r)
				}
				time.Sleep(20 * time.Millisecond) // pacing between attempts
			}
		}
	}
	return nil
}

// ClosePort stops serving port: listeners and open connections are closed,
// so new TCP connections are refused (RST) and UDP datagrams draw ICMP port
// unreachable. It returns once every goroutine serving it exited.
func (s *Server) ClosePort(port int) {
	s.mu.Lock()
	pl, ok := s.ports[port]
	delete(s.ports, port)
	s.mu.Unlock()
	if !ok {
		return
	}
	pl.close()
}

// Close stops serving every port.
func (s *Server) Close() {
	s.mu.Lock()
	ports := s.ports
	s.ports = map[int]*portListeners{}
	s.mu.Unlock()
	for _, pl := range ports {
		pl.close()
	}
}

func (pl *portListeners) close() {
	for _, l := range pl.tcp {
		l.Close()
	}
	for _, c := range pl.udp {
		c.Close()
	}
	pl.mu.Lock()
	for c := range pl.conns {
		c.Close()
	}
	pl.mu.Unlock()
	pl.wg.Wait()
}

func (s *Server) serveTCP(pl *portListeners, l net.Listener) {
	defer pl.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ECONNABORTED: keep serving
		}
		pl.mu.Lock()
		if pl.conns == nil {
			pl.conns = map[net.Conn]bool{}
		}
		pl.conns[c] = true
		pl.mu.Unlock()
		pl.wg.Add(1)
		go func() {
			defer pl.wg.Done()
			defer func() {
				pl.mu.Lock()
				delete(pl.conns, c)
				pl.mu.Unlock()
				c.Close()
			}()
			s.serveConn(c)
		}()
	}
}

// streamIdle is how long a TCP connection may stay idle before the server
// closes it.
const streamIdle = 2 * time.Minute

// serveConn greets a TCP connection with "<name> <peer>", then answers each
// line the client sends with the same greeting, until the client closes
// (see Stream): a long-lived connection shows that it still reaches the same
// server, with the same address translation.
//
// When the kernel sent the handshake's SYN-ACK again (the client's ACK, or
// the SYN-ACK itself, was dropped), the greeting ends in " retrans=<n>", so
// that the client knows of a drop on the way back (Result.Retransmits).
func (s *Server) serveConn(c net.Conn) {
	greeting := fmt.Sprintf("%s %s", s.host.Name, c.RemoteAddr())
	if n := connRetrans(c); n > 0 {
		greeting += fmt.Sprintf(" retrans=%d", n)
	}
	greeting += "\n"
	r := bufio.NewReader(c)
	for {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, greeting); err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(streamIdle))
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
	}
}

func (s *Server) serveUDP(pl *portListeners, c net.PacketConn) {
	defer pl.wg.Done()
	uc := c.(*net.UDPConn)
	buf := make([]byte, 2048)
	for {
		_, peer, err := uc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. a queued ICMP error: keep serving
		}
		peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
		_, _ = uc.WriteToUDPAddrPort([]byte(fmt.Sprintf("%s %s\n", s.host.Name, peer)), peer)
	}
}

func tcpNet(a netip.Addr) string {
	if a.Is4() {
		return "tcp4"
	}
	return "tcp6"
}

func udpNet(a netip.Addr) string {
	if a.Is4() {
		return "udp4"
	}
	return "udp6"
}
