package kubeproxy

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/proxyutil/sysctl"
)

// fakeHost is a host whose /proc/sys and /sys are files in a directory,
// with 2 CPUs; files maps sysctl names (under net/netfilter), "hashsize"
// and "oom_score_adj" to their initial values.
func fakeHost(t *testing.T, files map[string]int) host {
	t.Helper()
	dir := t.TempDir()
	h := host{
		sysctl: &sysctl.Sysctl{
			Root:     filepath.Join(dir, "proc", "sys"),
			Hashsize: filepath.Join(dir, "sys", "hashsize"),
			NumCPU:   func() int { return 2 },
		},
		oomScoreAdj: filepath.Join(dir, "oom_score_adj"),
	}
	for _, d := range []string{filepath.Join(h.sysctl.Root, "net", "netfilter"), filepath.Dir(h.sysctl.Hashsize)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range files {
		p := filepath.Join(h.sysctl.Root, "net", "netfilter", name)
		switch name {
		case "hashsize":
			p = h.sysctl.Hashsize
		case "oom_score_adj":
			p = h.oomScoreAdj
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return strings.TrimSpace(string(b))
}

// allConntrack are the conntrack sysctls of the defaults, at other values.
var allConntrack = map[string]int{"nf_conntrack_max": 65536, "nf_conntrack_tcp_timeout_established": 432000,
	"nf_conntrack_tcp_timeout_close_wait": 60, "nf_conntrack_tcp_be_liberal": 0, "nf_conntrack_udp_timeout": 30,
	"nf_conntrack_udp_timeout_stream": 120, "hashsize": 16384}

func TestApplyConntrack(t *testing.T) {
	ct := config.Default().Linux.Conntrack
	nf := func(h host, name string) string { return filepath.Join(h.sysctl.Root, "net", "netfilter", name) }
	t.Run("the defaults set the table size, the hash table and the TCP timeouts", func(t *testing.T) {
		h := fakeHost(t, allConntrack)
		if err := h.applyConntrack(context.Background(), ct); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]string{nf(h, "nf_conntrack_max"): "131072", nf(h, "nf_conntrack_tcp_timeout_established"): "86400",
			nf(h, "nf_conntrack_tcp_timeout_close_wait"): "3600", h.sysctl.Hashsize: "32768",
			nf(h, "nf_conntrack_udp_timeout"): "30", nf(h, "nf_conntrack_tcp_be_liberal"): "0"} {
			if got := readFile(t, p); got != want {
				t.Errorf("%s = %s, want %s", p, got, want)
			}
		}
	})
	t.Run("a table size this namespace lacks is skipped, and the timeouts still set", func(t *testing.T) {
		files := map[string]int{}
		for k, v := range allConntrack {
			if k != "nf_conntrack_max" {
				files[k] = v
			}
		}
		h := fakeHost(t, files)
		logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
		if err := h.applyConntrack(klog.NewContext(context.Background(), logger), ct); err != nil {
			t.Fatalf("applyConntrack: %v, want the missing sysctl skipped", err)
		}
		logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
		if !strings.Contains(logged, "Conntrack settings skipped") || !strings.Contains(logged, `settings="table size"`) || strings.Contains(logged, `settings="timeouts"`) {
			t.Errorf("want one log line saying the table size was skipped, got:\n%s", logged)
		}
		if got := readFile(t, nf(h, "nf_conntrack_tcp_timeout_established")); got != "86400" {
			t.Errorf("the timeout was not set: %s", got)
		}
		if got := readFile(t, h.sysctl.Hashsize); got != "16384" {
			t.Errorf("hashsize = %s: touched although nf_conntrack_max was not set", got)
		}
	})
	t.Run("zero values leave the kernel's", func(t *testing.T) {
		h := fakeHost(t, allConntrack)
		if err := h.applyConntrack(context.Background(), config.ConntrackConfiguration{}); err != nil {
			t.Fatal(err)
		}
		for name, v := range allConntrack {
			p := nf(h, name)
			if name == "hashsize" {
				p = h.sysctl.Hashsize
			}
			if got := readFile(t, p); got != strconv.Itoa(v) {
				t.Errorf("%s = %s, want it untouched (%d)", name, got, v)
			}
		}
	})
	t.Run("other failures are errors", func(t *testing.T) {
		h := fakeHost(t, nil)
		// A directory where a sysctl should be: not a permission problem.
		if err := os.Mkdir(nf(h, "nf_conntrack_max"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := h.applyConntrack(context.Background(), ct); err == nil {
			t.Error("applyConntrack succeeded, want an error")
		}
	})
}

func TestApplyOOMScoreAdj(t *testing.T) {
	h := fakeHost(t, map[string]int{"oom_score_adj": 0})
	h.applyOOMScoreAdj(context.Background(), -999)
	if got := readFile(t, h.oomScoreAdj); got != "-999" {
		t.Errorf("oom_score_adj = %s", got)
	}
}
