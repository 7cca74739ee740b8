package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/config"
)

// host is where the proxy's start-up settings are written: /proc/sys and
// /sys, and the process's oom_score_adj. Tests point it at a directory.
type host struct {
	procSys     string // /proc/sys
	hashsize    string // /sys/module/nf_conntrack/parameters/hashsize
	oomScoreAdj string // /proc/self/oom_score_adj
	numCPU      int
}

func realHost() host {
	return host{
		procSys:     "/proc/sys",
		hashsize:    "/sys/module/nf_conntrack/parameters/hashsize",
		oomScoreAdj: "/proc/self/oom_score_adj",
		numCPU:      runtime.NumCPU(),
	}
}

// sysctl is one integer setting under net/netfilter.
type sysctl struct {
	name  string // e.g. nf_conntrack_max
	value int
}

// conntrackSysctls returns the net/netfilter sysctls that ct asks for, by
// kube-proxy's rules: nf_conntrack_max = max(maxPerCore * CPUs, min), capped
// at 2^20, when maxPerCore > 0; each timeout when > 0; be_liberal when true.
// Zero means "leave the kernel's value".
func conntrackSysctls(ct config.ConntrackConfiguration, numCPU int) []sysctl {
	var out []sysctl
	if ct.MaxPerCore > 0 {
		const limit = 1 << 20 // kube-proxy's cap, against huge tables on many-core hosts
		ctMax := max(int(ct.MaxPerCore)*numCPU, int(ct.Min))
		if int(ct.MaxPerCore)*numCPU > limit {
			ctMax = limit
		}
		out = append(out, sysctl{"nf_conntrack_max", ctMax})
	}
	seconds := func(name string, d time.Duration) {
		if d > 0 {
			out = append(out, sysctl{name, int(d / time.Second)})
		}
	}
	seconds("nf_conntrack_tcp_timeout_established", ct.TCPEstablishedTimeout)
	seconds("nf_conntrack_tcp_timeout_close_wait", ct.TCPCloseWaitTimeout)
	if ct.TCPBeLiberal {
		out = append(out, sysctl{"nf_conntrack_tcp_be_liberal", 1})
	}
	seconds("nf_conntrack_udp_timeout", ct.UDPTimeout)
	seconds("nf_conntrack_udp_timeout_stream", ct.UDPStreamTimeout)
	return out
}

// forbidden reports whether err means the setting cannot be written here
// (a network namespace other than the host's, where nf_conntrack_max is
// read-only; a read-only /sys in a container; conntrack not loaded), as
// opposed to a real failure.
func forbidden(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EROFS)
}

// applyConntrack writes the conntrack sysctls of ct. Settings the namespace
// forbids are skipped with a log line each; other failures are returned.
// The hash table is grown (hashsize >= nf_conntrack_max/4) only after
// nf_conntrack_max was written: hashsize is global to the host, and a proxy
// in a network namespace that may not set nf_conntrack_max must not touch it.
func (h host) applyConntrack(ctx context.Context, ct config.ConntrackConfiguration) error {
	logger := klog.FromContext(ctx)
	for _, s := range conntrackSysctls(ct, h.numCPU) {
		path := filepath.Join(h.procSys, "net", "netfilter", s.name)
		written, err := writeIfDifferent(path, s.value)
		if err != nil {
			if forbidden(err) {
				logger.Info("Conntrack sysctl not set: not allowed here (e.g. a network namespace other than the host's)", "sysctl", "net/netfilter/"+s.name, "value", s.value, "err", err)
				continue
			}
			return err
		}
		if written {
			logger.Info("Set sysctl", "sysctl", "net/netfilter/"+s.name, "value", s.value)
		}
		if s.name == "nf_conntrack_max" && written {
			if err := h.growHashsize(ctx, s.value/4); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h host) growHashsize(ctx context.Context, want int) error {
	logger := klog.FromContext(ctx)
	current, err := readInt(h.hashsize)
	if err == nil && current >= want {
		return nil
	}
	if err == nil {
		err = os.WriteFile(h.hashsize, []byte(strconv.Itoa(want)), 0o640)
	}
	if err != nil {
		if forbidden(err) {
			logger.Info("Conntrack hashsize not set: not allowed here (e.g. a read-only /sys)", "hashsize", want, "err", err)
			return nil
		}
		return err
	}
	logger.Info("Set conntrack hashsize", "hashsize", want)
	return nil
}

// applyOOMScoreAdj sets the process's oom_score_adj, as kube-proxy does; a
// failure is logged, not fatal (as kube-proxy).
func (h host) applyOOMScoreAdj(ctx context.Context, value int32) {
	if _, err := writeIfDifferent(h.oomScoreAdj, int(value)); err != nil {
		klog.FromContext(ctx).Info("oom_score_adj not set", "value", value, "err", err)
	}
}

// writeIfDifferent writes value to an integer file unless it already holds
// it, and reports whether it wrote.
func writeIfDifferent(path string, value int) (bool, error) {
	if current, err := readInt(path); err == nil && current == value {
		return false, nil
	} else if err != nil && !errors.Is(err, strconv.ErrSyntax) {
		return false, err
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(value)), 0o644); err != nil {
		return false, err
	}
	return true, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
