//go:build e2e

package sysctl

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/internal/netnstest"
)

// isolated runs fn in a network namespace of the test's own, so nothing it
// does reaches the host. With private, fn's thread also has a mount
// namespace of its own, whose mounts do not propagate back to the host. The
// thread is discarded after fn, and the namespaces die with it and the test.
func isolated(t *testing.T, private bool, fn func() error) {
	t.Helper()
	err := netnstest.New(t, "sysctl").Do(func() error {
		if private {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return err
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return err
			}
		}
		return fn()
	})
	if err != nil {
		t.Fatal(err)
	}
}

const routeLocalnet = "net/ipv4/conf/all/route_localnet"

func TestEnsureInOwnNetns(t *testing.T) {
	hostBefore, err := GetInt(routeLocalnet)
	if err != nil {
		t.Fatal(err)
	}
	isolated(t, false, func() error {
		if v, err := GetInt(routeLocalnet); err != nil || v != 0 {
			t.Errorf("fresh namespace: route_localnet = %d, %v", v, err)
		}
		changed, err := Ensure(routeLocalnet, 1)
		if err != nil || !changed {
			t.Errorf("Ensure = %v, %v", changed, err)
		}
		if v, _ := GetInt(routeLocalnet); v != 1 {
			t.Errorf("after Ensure: %d", v)
		}
		if changed, err := Ensure(routeLocalnet, 1); err != nil || changed {
			t.Errorf("second Ensure = %v, %v; want no write", changed, err)
		}
		return nil
	})
	if v, _ := GetInt(routeLocalnet); v != hostBefore {
		t.Errorf("the host's route_localnet changed: %d -> %d", hostBefore, v)
	}
}

func TestConntrackInOwnNetns(t *testing.T) {
	if _, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_max"); err != nil {
		t.Fatalf("nf_conntrack is not loaded (modprobe nf_conntrack): %v", err)
	}
	isolated(t, false, func() error {
		// Timeouts are per namespace and writable.
		err := ApplyConntrack(context.Background(), Conntrack{
			TCPEstablishedTimeout: 2 * time.Hour,
			TCPCloseWaitTimeout:   90 * time.Second,
			TCPBeLiberal:          true,
			UDPTimeout:            45 * time.Second,
			UDPStreamTimeout:      150 * time.Second,
		})
		if err != nil {
			return err
		}
		for name, want := range map[string]int{
			"nf_conntrack_tcp_timeout_established": 7200,
			"nf_conntrack_tcp_timeout_close_wait":  90,
			"nf_conntrack_tcp_be_liberal":          1,
			"nf_conntrack_udp_timeout":             45,
			"nf_conntrack_udp_timeout_stream":      150,
		} {
			if v, err := GetInt("net/netfilter/" + name); err != nil || v != want {
				t.Errorf("%s = %d, %v; want %d", name, v, err, want)
			}
		}
		// nf_conntrack_max belongs to the initial namespace only: the error
		// must say so.
		cur, err := GetInt("net/netfilter/nf_conntrack_max")
		if err != nil {
			return err
		}
		err = Set("net/netfilter/nf_conntrack_max", "12345")
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("nf_conntrack_max in a child namespace: %v, want ErrReadOnly", err)
		}
		t.Logf("refused as expected: %v", err)
		// ...but asking for the value it already has is no error.
		if _, err := Ensure("net/netfilter/nf_conntrack_max", cur); err != nil {
			t.Errorf("Ensure of the current value: %v", err)
		}
		return nil
	})
}

func TestReadOnlyProcSys(t *testing.T) {
	// A container's /proc/sys: our own mount namespace, /proc/sys bound
	// read-only (and our own network namespace, so a wrong write harms no one).
	isolated(t, true, func() error {
		if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND, ""); err != nil {
			return err
		}
		if err := unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return err
		}
		_, err := Ensure(routeLocalnet, 1)
		if !errors.Is(err, ErrReadOnly) || !errors.Is(err, unix.EROFS) {
			t.Errorf("write to a read-only /proc/sys: %v, want ErrReadOnly and EROFS", err)
		}
		t.Logf("refused as expected: %v", err)
		if v, err := GetInt(routeLocalnet); err != nil || v != 0 {
			t.Errorf("read still works: %d, %v", v, err)
		}
		return nil
	})
}
