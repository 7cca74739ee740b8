package kubeproxy

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/proxyutil/sysctl"
)

// host is where the proxy's start-up settings are written: the sysctl tree
// and the process's oom_score_adj. Tests point both at a directory.
type host struct {
	sysctl      *sysctl.Sysctl
	oomScoreAdj string // /proc/self/oom_score_adj
}

func realHost() host {
	return host{sysctl: sysctl.Default, oomScoreAdj: "/proc/self/oom_score_adj"}
}

// notAllowedHere reports whether err means a setting cannot be written
// here (nf_conntrack_max outside the host's network namespace, a read-only
// /proc/sys or /sys in a container, conntrack not loaded) rather than a
// real failure.
func notAllowedHere(err error) bool {
	return errors.Is(err, sysctl.ErrReadOnly) || errors.Is(err, fs.ErrPermission) ||
		errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EROFS)
}

// applyConntrack applies the conntrack settings of ct, as kube-proxy does at
// start, with proxyutil/sysctl. The table size (nf_conntrack_max, and the
// hash table after it) and the timeouts are applied separately, so that a
// network namespace where nf_conntrack_max is read-only still gets its own
// timeouts; what the namespace forbids is skipped with a log line, other
// failures are returned.
func (h host) applyConntrack(ctx context.Context, ct config.ConntrackConfiguration) error {
	limit := sysctl.Conntrack{MaxPerCore: ct.MaxPerCore, Min: ct.Min}
	timeouts := sysctl.Conntrack{
		TCPEstablishedTimeout: ct.TCPEstablishedTimeout,
		TCPCloseWaitTimeout:   ct.TCPCloseWaitTimeout,
		TCPBeLiberal:          ct.TCPBeLiberal,
		UDPTimeout:            ct.UDPTimeout,
		UDPStreamTimeout:      ct.UDPStreamTimeout,
	}
	for _, part := range []struct {
		what string
		ct   sysctl.Conntrack
	}{{"table size", limit}, {"timeouts", timeouts}} {
		err := h.sysctl.ApplyConntrack(ctx, part.ct)
		switch {
		case err == nil:
		case notAllowedHere(err):
			klog.FromContext(ctx).Info("Conntrack settings skipped: not allowed here", "settings", part.what, "err", err)
		default:
			return err
		}
	}
	return nil
}

// applyOOMScoreAdj sets the process's oom_score_adj, as kube-proxy does; a
// failure is logged, not fatal (as kube-proxy).
func (h host) applyOOMScoreAdj(ctx context.Context, value int32) {
	if b, err := os.ReadFile(h.oomScoreAdj); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(int(value)) {
		return
	}
	if err := os.WriteFile(h.oomScoreAdj, []byte(strconv.Itoa(int(value))), 0o644); err != nil {
		klog.FromContext(ctx).Info("oom_score_adj not set", "value", value, "err", err)
	}
}
