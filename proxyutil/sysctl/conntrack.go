package sysctl

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Conntrack is kube-proxy's conntrack configuration (the fields of
// KubeProxyConntrackConfiguration, zero meaning "leave the kernel's value").
type Conntrack struct {
	// MaxPerCore is the number of conntrack entries per CPU; with Min it
	// sets nf_conntrack_max.
	MaxPerCore int32
	// Min is the least nf_conntrack_max, whatever the CPU count.
	Min int32
	// TCPEstablishedTimeout sets nf_conntrack_tcp_timeout_established.
	TCPEstablishedTimeout time.Duration
	// TCPCloseWaitTimeout sets nf_conntrack_tcp_timeout_close_wait.
	TCPCloseWaitTimeout time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal to 1 (out-of-window
	// packets are not marked INVALID).
	TCPBeLiberal bool
	// UDPTimeout sets nf_conntrack_udp_timeout.
	UDPTimeout time.Duration
	// UDPStreamTimeout sets nf_conntrack_udp_timeout_stream.
	UDPStreamTimeout time.Duration
}

// maxConntrackMax caps MaxPerCore x CPUs, as kube-proxy does, so that a
// machine with many cores does not reserve a huge table.
const maxConntrackMax = 1 << 20

// ConntrackMax returns the nf_conntrack_max that cfg asks for on a machine
// with numCPU CPUs, 0 meaning "leave it": MaxPerCore x numCPU, at least
// Min, at most 1048576.
func ConntrackMax(cfg Conntrack, numCPU int) int {
	if cfg.MaxPerCore <= 0 {
		return 0
	}
	scaled := int(cfg.MaxPerCore) * numCPU
	if scaled > maxConntrackMax {
		return maxConntrackMax
	}
	return max(scaled, int(cfg.Min))
}

// ApplyConntrack applies cfg to the real tree; see [Sysctl.ApplyConntrack].
func ApplyConntrack(ctx context.Context, cfg Conntrack) error {
	return Default.ApplyConntrack(ctx, cfg)
}

// ApplyConntrack sets the conntrack parameters cfg asks for, as kube-proxy
// does at start: nf_conntrack_max (and the hash table size to a quarter of
// it when smaller), then the TCP and UDP timeouts. A parameter already at
// its value is not written. It stops at the first error.
func (s *Sysctl) ApplyConntrack(ctx context.Context, cfg Conntrack) error {
	log := klog.FromContext(ctx)
	if n := ConntrackMax(cfg, s.numCPU()); n > 0 {
		if err := s.ensure(ctx, "net/netfilter/nf_conntrack_max", n); err != nil {
			return err
		}
		// A hash table much smaller than the table makes lookups slow.
		size, err := readInt(s.Hashsize)
		if err != nil {
			return fmt.Errorf("conntrack hashsize: %w", err)
		}
		if size < n/4 {
			log.Info("Setting conntrack hashsize", "hashsize", n/4)
			if err := os.WriteFile(s.Hashsize, []byte(strconv.Itoa(n/4)), 0o640); err != nil {
				return fmt.Errorf("conntrack hashsize %d: %w", n/4, err)
			}
		}
	}
	// In kube-proxy's order; a zero (unset) parameter is left alone.
	for _, p := range []struct {
		name  string
		set   bool
		value int
	}{
		{"nf_conntrack_tcp_timeout_established", cfg.TCPEstablishedTimeout > 0, int(cfg.TCPEstablishedTimeout / time.Second)},
		{"nf_conntrack_tcp_timeout_close_wait", cfg.TCPCloseWaitTimeout > 0, int(cfg.TCPCloseWaitTimeout / time.Second)},
		{"nf_conntrack_tcp_be_liberal", cfg.TCPBeLiberal, 1},
		{"nf_conntrack_udp_timeout", cfg.UDPTimeout > 0, int(cfg.UDPTimeout / time.Second)},
		{"nf_conntrack_udp_timeout_stream", cfg.UDPStreamTimeout > 0, int(cfg.UDPStreamTimeout / time.Second)},
	} {
		if p.set {
			if err := s.ensure(ctx, "net/netfilter/"+p.name, p.value); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Sysctl) ensure(ctx context.Context, name string, value int) error {
	changed, err := s.Ensure(name, value)
	if changed {
		klog.FromContext(ctx).Info("Set sysctl", "entry", name, "value", value)
	}
	return err
}

func (s *Sysctl) numCPU() int {
	if s.NumCPU != nil {
		return s.NumCPU()
	}
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	if n, err := countCPUList(string(b)); err == nil && n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// countCPUList counts the CPUs of a kernel CPU list such as "0-3,8,10-11".
func countCPUList(list string) (int, error) {
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(list), ",") {
		if r == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("cpu list %q: %w", list, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("cpu list %q: %w", list, err)
			}
		}
		if b < a {
			return 0, fmt.Errorf("cpu list %q: bad range %q", list, r)
		}
		n += b - a + 1
	}
	return n, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
