// Package nfacct reads and creates the kernel's named packet counters
// (nfnetlink_acct, the objects of the `nfacct` tool and of iptables'
// `-m nfacct` match), which kube-proxy's iptables mode uses for two of its
// metrics:
//
//   - LocalhostNodePortsAccepted counts packets accepted on node ports of
//     127.0.0.0/8 (kubeproxy_iptables_localhost_nodeports_accepted_packets_total);
//   - InvalidDropped counts packets dropped in conntrack state INVALID
//     (kubeproxy_iptables_ct_state_invalid_dropped_packets_total).
//
// A counter belongs to the network namespace of the socket that made it.
package nfacct

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The counters kube-proxy's iptables mode names.
const (
	LocalhostNodePortsAccepted = "localhost_nps_accepted_pkts"
	InvalidDropped             = "ct_state_invalid_dropped_pkts"
)

// MaxNameLen is the longest name the kernel takes (NFACCT_NAME_MAX, 32,
// holds the terminating NUL).
const MaxNameLen = 31

// nfnetlink's accounting subsystem (linux/netfilter/nfnetlink_acct.h).
const (
	subsysAcct = 7 // NFNL_SUBSYS_ACCT
	msgNew     = 0 // NFNL_MSG_ACCT_NEW
	msgGet     = 1 // NFNL_MSG_ACCT_GET

	attrName  = 1 // NFACCT_NAME, string
	attrPkts  = 2 // NFACCT_PKTS, u64, big-endian
	attrBytes = 3 // NFACCT_BYTES, u64, big-endian
)

// Counter is one counter's value.
type Counter struct {
	Name           string
	Packets, Bytes uint64
}

// Client talks to the accounting subsystem of the caller's network
// namespace (the one its Open ran in).
type Client struct {
	fd  int
	seq uint32
}

// timeout bounds the wait for the kernel's answer to one request.
const timeout = 5 * time.Second

// Open opens a netfilter netlink socket.
func Open() (*Client, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nfacct: netfilter netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nfacct: netfilter netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nfacct: netfilter netlink socket: %w", err)
	}
	return &Client{fd: fd}, nil
}

// Close closes the socket.
func (c *Client) Close() error { return unix.Close(c.fd) }

// Ensure creates the counter name unless it exists.
func (c *Client) Ensure(name string) error {
	_, err := c.Get(name)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return err
	}
	_, err = c.execute(msgNew, unix.NLM_F_CREATE|unix.NLM_F_EXCL, name)
	if errors.Is(err, unix.EEXIST) { // made meanwhile by another process
		return nil
	}
	if err != nil {
		return fmt.Errorf("nfacct: creating counter %q: %w", name, err)
	}
	return nil
}

// Get reads the counter name. A counter that does not exist is an error
// that errors.Is unix.ENOENT.
func (c *Client) Get(name string) (Counter, error) {
	answers, err := c.execute(msgGet, 0, name)
	if err != nil {
		return Counter{}, fmt.Errorf("nfacct: reading counter %q: %w", name, err)
	}
	for _, data := range answers {
		ctr, err := decode(data)
		if err != nil {
			return Counter{}, fmt.Errorf("nfacct: reading counter %q: %w", name, err)
		}
		if ctr.Name == name {
			return ctr, nil
		}
	}
	return Counter{}, fmt.Errorf("nfacct: reading counter %q: the kernel answered without it", name)
}

// execute sends one request, with NLM_F_ACK, and returns the payloads of
// the kernel's answers before its acknowledgement, or the error the
// acknowledgement carries. (The kernel marks its one answer to a get
// NLM_F_MULTI without an NLMSG_DONE after it, so the acknowledgement is
// what ends the exchange.)
func (c *Client) execute(msg uint16, flags uint16, name string) ([][]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	c.seq++
	req := request(msg, unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags, c.seq, name)
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var answers [][]byte
	buf := make([]byte, 16384)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			return nil, fmt.Errorf("no answer from the kernel within %s", timeout)
		}
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != c.seq {
				continue // a late answer to an earlier request
			}
			if m.Header.Type == unix.NLMSG_ERROR {
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error message")
				}
				if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
					return nil, unix.Errno(-errno)
				}
				return answers, nil
			}
			// A copy: the next read reuses buf.
			answers = append(answers, slices.Clone(m.Data))
		}
	}
}

// request is one netlink message: header, nfgenmsg (AF_UNSPEC,
// NFNETLINK_V0, resource id 0), and the NFACCT_NAME attribute.
func request(msg, flags uint16, seq uint32, name string) []byte {
	attrLen := unix.SizeofRtAttr + len(name) + 1 // NUL-terminated
	size := unix.SizeofNlMsghdr + 4 + nlaAlign(attrLen)
	b := make([]byte, size)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(size))
	ne.PutUint16(b[4:], subsysAcct<<8|msg)
	ne.PutUint16(b[6:], flags)
	ne.PutUint32(b[8:], seq)
	b[16], b[17] = unix.AF_UNSPEC, unix.NFNETLINK_V0
	a := b[unix.SizeofNlMsghdr+4:]
	ne.PutUint16(a[0:], uint16(attrLen))
	ne.PutUint16(a[2:], attrName)
	copy(a[unix.SizeofRtAttr:], name)
	return b
}

func nlaAlign(n int) int { return (n + 3) &^ 3 }

func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("nfacct: counter name %q: want 1 to %d bytes", name, MaxNameLen)
	}
	return nil
}

// decode reads a counter from a message's payload: nfgenmsg, then
// attributes.
func decode(data []byte) (Counter, error) {
	if len(data) < 4 {
		return Counter{}, fmt.Errorf("message of %d bytes, shorter than its nfgenmsg header", len(data))
	}
	var ctr Counter
	for b := data[4:]; len(b) > 0; {
		if len(b) < unix.SizeofRtAttr {
			return Counter{}, fmt.Errorf("attribute of %d bytes, shorter than its header", len(b))
		}
		l, typ := int(binary.NativeEndian.Uint16(b[0:])), binary.NativeEndian.Uint16(b[2:])&^unix.NLA_F_NESTED
		if l < unix.SizeofRtAttr || l > len(b) {
			return Counter{}, fmt.Errorf("attribute %d claims %d bytes of %d", typ, l, len(b))
		}
		v := b[unix.SizeofRtAttr:l]
		switch typ {
		case attrName:
			ctr.Name = strings.TrimRight(string(v), "\x00")
		case attrPkts, attrBytes:
			if len(v) != 8 {
				return Counter{}, fmt.Errorf("counter attribute %d of %d bytes, want 8", typ, len(v))
			}
			if typ == attrPkts {
				ctr.Packets = binary.BigEndian.Uint64(v)
			} else {
				ctr.Bytes = binary.BigEndian.Uint64(v)
			}
		}
		b = b[min(nlaAlign(l), len(b)):]
	}
	return ctr, nil
}
