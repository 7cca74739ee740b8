//go:build e2e

package nfacct

import (
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/internal/netnstest"
)

// In a namespace of its own: Ensure makes a counter once, an iptables
// rule's -m nfacct counts into it, and Get reads what the kernel counted.
func TestCounterCountsMatchedPackets(t *testing.T) {
	ns := netnstest.New(t, "nfacct")
	if out, err := ns.Run("iptables", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--dport", "9", "-m", "nfacct", "--nfacct-name", LocalhostNodePortsAccepted); err == nil {
		t.Fatalf("iptables accepted -m nfacct of a counter that does not exist yet: %s", out)
	}
	err := ns.Do(func() error {
		c, err := Open()
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Get(LocalhostNodePortsAccepted); !errors.Is(err, unix.ENOENT) {
			t.Errorf("Get before Ensure: %v, want ENOENT", err)
		}
		for range 2 { // the second finds it
			if err := c.Ensure(LocalhostNodePortsAccepted); err != nil {
				return err
			}
		}
		if ctr, err := c.Get(LocalhostNodePortsAccepted); err != nil || ctr.Packets != 0 {
			t.Errorf("new counter: %+v, %v; want 0 packets", ctr, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ns.Run("iptables", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--dport", "9", "-m", "nfacct", "--nfacct-name", LocalhostNodePortsAccepted); err != nil {
		t.Fatalf("iptables -m nfacct: %v: %s", err, out)
	}
	err = ns.Do(func() error {
		// Unconnected: the port unreachable a datagram meets cannot
		// stop the next one.
		conn, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer conn.Close()
		for range 3 {
			if _, err := conn.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}); err != nil {
				return err
			}
		}
		c, err := Open()
		if err != nil {
			return err
		}
		defer c.Close()
		ctr, err := c.Get(LocalhostNodePortsAccepted)
		if err != nil {
			return err
		}
		if ctr.Packets != 3 || ctr.Bytes == 0 {
			t.Errorf("after 3 datagrams: %+v, want 3 packets", ctr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
