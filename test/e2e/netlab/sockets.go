package netlab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A dataplane that hooks sockets by cgroup (to-ebpf's cgroup programs)
// sees a socket in the cgroup it was created in, whoever uses it later.
// The test process is in no node's cgroup, and a Go process cannot put one
// of its threads in another cgroup, so in a lab with cgroups (Spec.Cgroups)
// each node and pod has a socket maker: a process born in the host's
// cgroup (CLONE_INTO_CGROUP) and network namespace whose only job is to
// open sockets and hand them over (SCM_RIGHTS). The test process then
// connects, sends and reads on them with the same code as on its own
// sockets: what a dataplane does is tied to the socket, and the socket is
// the host's.
//
// The socket maker is the test binary itself, run again with socketsEnv
// set: this package's init then serves sockets and exits, before any test
// runs.
const socketsEnv = "KPNG_NETLAB_SOCKET_MAKER"

func init() {
	if os.Getenv(socketsEnv) == "1" {
		os.Exit(serveSockets(os.NewFile(3, "netlab-sockets")))
	}
}

// serveSockets answers each request on f, a SOCK_SEQPACKET socket: a
// request is two bytes, the address family and the socket type; the answer
// is "ok" with the new socket's descriptor, or an error message. It
// returns when the test process closes its end.
func serveSockets(f *os.File) int {
	fd := int(f.Fd())
	// f is not used past this line: without this, a garbage collection
	// runs f's finalizer, which closes fd under the loop, and the next
	// socket takes its number (the maker then answers on that socket and
	// dies: EDESTADDRREQ, after some thousands of requests).
	defer runtime.KeepAlive(f)
	req := make([]byte, 16)
	for {
		n, _, _, _, err := unix.Recvmsg(fd, req, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return 0
		}
		if n != 2 {
			_ = unix.Sendto(fd, []byte("bad request"), 0, nil)
			continue
		}
		s, err := unix.Socket(int(req[0]), int(req[1])|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			_ = unix.Sendto(fd, []byte("socket: "+err.Error()), 0, nil)
			continue
		}
		err = unix.Sendmsg(fd, []byte("ok"), unix.UnixRights(s), nil, 0)
		unix.Close(s)
		if err != nil {
			return 1
		}
	}
}

// socketMaker is the test process's end of a host's socket maker.
type socketMaker struct {
	host string
	mu   sync.Mutex
	conn *os.File
}

// startSocketMaker starts h's socket maker in h's namespace and in cgroup,
// as a process of the lab (stopped at teardown).
func (l *Lab) startSocketMaker(h *Host, cgroup string) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket maker of %s: %w", h.Name, err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "netlab-sockets"), os.NewFile(uintptr(fds[1]), "netlab-sockets")
	defer theirs.Close() // the child has its copy: our end sees EOF when it dies
	exe, err := os.Executable()
	if err != nil {
		ours.Close()
		return fmt.Errorf("socket maker of %s: %w", h.Name, err)
	}
	p, err := h.NS.start(procOptions{cgroup: cgroup, env: []string{socketsEnv + "=1"}, files: []*os.File{theirs}}, exe)
	if err != nil {
		ours.Close()
		return fmt.Errorf("socket maker of %s: %w", h.Name, err)
	}
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	// A request is answered in microseconds; a dead maker is seen as EOF.
	// The bound only keeps a wedged one from hanging a test.
	tv := unix.NsecToTimeval((10 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(int(ours.Fd()), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		ours.Close()
		return fmt.Errorf("socket maker of %s: %w", h.Name, err)
	}
	h.sockets = &socketMaker{host: h.Name, conn: ours}
	return nil
}

// socket returns a new socket of the maker's host, non-blocking.
func (m *socketMaker) socket(family, typ int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fd := int(m.conn.Fd())
	if err := unix.Sendto(fd, []byte{byte(family), byte(typ)}, 0, nil); err != nil {
		return -1, fmt.Errorf("socket maker of %s: %w", m.host, err)
	}
	buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	// A socket with SO_RCVTIMEO is not restarted after a signal (Go's
	// preemption sends them): EINTR, nothing read. Giving up would leave
	// the answer to be read as the next request's, every later socket
	// one answer late.
	for errors.Is(err, unix.EINTR) {
		n, oobn, _, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil || n == 0 {
		return -1, fmt.Errorf("socket maker of %s: no answer (%v): is it still running?", m.host, err)
	}
	if string(buf[:n]) != "ok" {
		return -1, fmt.Errorf("socket maker of %s: %s", m.host, buf[:n])
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("socket maker of %s: no descriptor in its answer (%v)", m.host, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("socket maker of %s: no descriptor in its answer (%v)", m.host, err)
	}
	return fds[0], nil
}

// close ends the maker's connection (the maker exits when it sees EOF).
func (m *socketMaker) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conn.Close()
}

// dial connects a socket of the maker's host, from source port port (0:
// an ephemeral one), to dst, with IP_RECVERR set (see recvErr), within
// ctx's deadline. Errors are as net.Dialer's: a *net.OpError wrapping the
// errno, or os.ErrDeadlineExceeded.
func (m *socketMaker) dial(ctx context.Context, network string, port uint16, dst netip.AddrPort) (net.Conn, connInfo, error) {
	family, level, opt := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_RECVERR
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: dst.Addr().As16(), Port: int(dst.Port())}
	var local unix.Sockaddr = &unix.SockaddrInet6{Port: int(port)}
	if a := dst.Addr().Unmap(); a.Is4() {
		family, level, opt = unix.AF_INET, unix.IPPROTO_IP, unix.IP_RECVERR
		sa = &unix.SockaddrInet4{Addr: a.As4(), Port: int(dst.Port())}
		local = &unix.SockaddrInet4{Port: int(port)}
	}
	typ := unix.SOCK_STREAM
	if strings.HasPrefix(network, "udp") {
		typ = unix.SOCK_DGRAM
	}
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(dst), Err: err}
	}
	began := time.Now()
	fd, err := m.socket(family, typ)
	if err != nil {
		return nil, connInfo{began: began}, opErr(err)
	}
	f := os.NewFile(uintptr(fd), "socket")
	defer f.Close() // FileConn has its own descriptor
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		return nil, connInfo{began: began}, opErr(os.NewSyscallError("setsockopt", err))
	}
	if port != 0 {
		if err := unix.Bind(fd, local); err != nil {
			return nil, connInfo{began: began}, opErr(os.NewSyscallError("bind", err))
		}
	}
	err = connectWithin(ctx, fd, sa)
	ci := socketInfo(fd, typ == unix.SOCK_STREAM)
	ci.began = began
	if err != nil {
		return nil, ci, opErr(err)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, ci, opErr(err)
	}
	return c, ci, nil
}

// connectWithin connects the non-blocking socket fd to sa, waiting for
// the outcome until ctx is done, as the Go runtime's connect does: poll
// for writability (or an error), then SO_ERROR.
func connectWithin(ctx context.Context, fd int, sa unix.Sockaddr) error {
	err := unix.Connect(fd, sa)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINPROGRESS) {
		return os.NewSyscallError("connect", err)
	}
	for {
		wait := 100 * time.Millisecond // to see ctx's cancellation
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		if ctx.Err() != nil || wait <= 0 {
			return os.ErrDeadlineExceeded
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, int(max(wait.Milliseconds(), 1)))
		if errors.Is(err, unix.EINTR) || n == 0 {
			continue
		}
		if err != nil {
			return os.NewSyscallError("poll", err)
		}
		// SO_ERROR also returns (and clears) the soft error an ICMP error
		// left while connect held the socket, as for Go's own connect.
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return os.NewSyscallError("getsockopt", err)
		}
		if soErr != 0 {
			return os.NewSyscallError("connect", unix.Errno(soErr))
		}
		if _, err := unix.Getpeername(fd); err == nil {
			return nil
		}
		// Woken with no error and not connected yet: an ICMP error queued
		// (IP_RECVERR) after its soft error was taken. Its errno is the
		// outcome; reading it also empties the queue, which would keep
		// waking the poll.
		if errno := errQueue(fd); errno != 0 {
			return os.NewSyscallError("connect", errno)
		}
	}
}

// errQueue reads one entry of the socket's error queue and returns its
// errno, or 0.
func errQueue(fd int) unix.Errno {
	buf, oob := make([]byte, 512), make([]byte, 512)
	_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
	if err != nil {
		return 0
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if (m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR) ||
			(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR) {
			if len(m.Data) >= 4 {
				return unix.Errno(binary.NativeEndian.Uint32(m.Data[:4]))
			}
		}
	}
	return 0
}

// connect opens a socket of h to dst and connects it within ctx: h's own
// (its socket maker's) in a lab with cgroups, else one the test process
// opens in h's namespace. IP_RECVERR is set either way (see recvErr).
func (h *Host) connect(ctx context.Context, proto Protocol, dst netip.AddrPort) (net.Conn, error) {
	conn, _, err := h.connectCounted(ctx, proto, 0, dst)
	return conn, err
}

// connInfo is what the kernel says of a client socket once its connect
// ended, whether it succeeded or not.
type connInfo struct {
	// retrans is, for TCP, how many SYNs the kernel sent again
	// (Result.Retransmits).
	retrans int
	// local is the socket's own address and port: for a connect that
	// failed, the tuple to look for in the nodes' conntrack tables.
	local netip.AddrPort
	// began is when the socket was about to be made: after the wait for
	// a thread in the host's namespace, for the test process's sockets.
	began time.Time
}

// socketInfo reads connInfo from socket fd.
func socketInfo(fd int, tcp bool) connInfo {
	var ci connInfo
	if tcp {
		ci.retrans = fdRetrans(fd)
	}
	if sa, err := unix.Getsockname(fd); err == nil {
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			ci.local = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
		case *unix.SockaddrInet6:
			ci.local = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
		}
	}
	return ci
}

// connectCounted is connect from source port port (0: an ephemeral one),
// which also returns connInfo.
func (h *Host) connectCounted(ctx context.Context, proto Protocol, port uint16, dst netip.AddrPort) (net.Conn, connInfo, error) {
	if h.sockets != nil {
		return h.sockets.dial(ctx, string(proto), port, dst)
	}
	var conn net.Conn
	var ci connInfo
	err := h.Do(func() error {
		began := time.Now()
		defer func() { ci.began = began }()
		// A literal address means the dialer connects from this goroutine,
		// hence from this namespace.
		dup := -1
		d := net.Dialer{LocalAddr: localAddr(proto, port), Control: func(network, address string, c syscall.RawConn) error {
			if err := recvErr(network, address, c); err != nil {
				return err
			}
			// A second descriptor of the socket, to read its TCP_INFO
			// and address after a failed connect, which closes the
			// dialer's.
			var derr error
			if err := c.Control(func(fd uintptr) { dup, derr = unix.Dup(int(fd)) }); err != nil {
				return err
			}
			if derr != nil {
				return fmt.Errorf("dup: %w", derr)
			}
			return nil
		}}
		c, err := d.DialContext(ctx, string(proto), dst.String())
		if dup >= 0 {
			ci = socketInfo(dup, proto == TCP)
			unix.Close(dup)
		}
		conn = c
		return err
	})
	return conn, ci, err
}

// localAddr is the address a dialer binds to for source port port: none
// (an ephemeral port) if 0.
func localAddr(proto Protocol, port uint16) net.Addr {
	switch {
	case port == 0:
		return nil
	case proto == UDP:
		return &net.UDPAddr{Port: int(port)}
	}
	return &net.TCPAddr{Port: int(port)}
}

// fdRetrans is the number of segments the kernel sent again on TCP socket
// fd (tcpi_total_retrans; an accepted socket's count starts with its
// SYN-ACK's), or 0 if it cannot be read.
func fdRetrans(fd int) int {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0
	}
	return int(info.Total_retrans)
}

// connRetrans is fdRetrans of a TCP connection, 0 for any other.
func connRetrans(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) { n = fdRetrans(int(fd)) })
	return n
}
