package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/config"
)

func TestConntrackSysctls(t *testing.T) {
	def := config.Default().Linux.Conntrack
	cases := []struct {
		name   string
		ct     func(ct *config.ConntrackConfiguration)
		numCPU int
		want   []sysctl
	}{
		{name: "defaults: the minimum wins on few CPUs, timeouts set, UDP left", numCPU: 2, want: []sysctl{
			{"nf_conntrack_max", 131072}, {"nf_conntrack_tcp_timeout_established", 86400}, {"nf_conntrack_tcp_timeout_close_wait", 3600}}},
		{name: "per core wins on many CPUs", numCPU: 8, want: []sysctl{
			{"nf_conntrack_max", 262144}, {"nf_conntrack_tcp_timeout_established", 86400}, {"nf_conntrack_tcp_timeout_close_wait", 3600}}},
		{name: "capped at 2^20", numCPU: 64, want: []sysctl{
			{"nf_conntrack_max", 1 << 20}, {"nf_conntrack_tcp_timeout_established", 86400}, {"nf_conntrack_tcp_timeout_close_wait", 3600}}},
		{name: "maxPerCore 0 leaves the limit and ignores min", numCPU: 2, ct: func(ct *config.ConntrackConfiguration) {
			ct.MaxPerCore, ct.Min, ct.TCPEstablishedTimeout, ct.TCPCloseWaitTimeout = 0, 5, 0, 0
		}},
		{name: "liberal TCP and UDP timeouts", numCPU: 1, ct: func(ct *config.ConntrackConfiguration) {
			*ct = config.ConntrackConfiguration{TCPBeLiberal: true, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2 * time.Minute}
		}, want: []sysctl{{"nf_conntrack_tcp_be_liberal", 1}, {"nf_conntrack_udp_timeout", 30}, {"nf_conntrack_udp_timeout_stream", 120}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ct := def
			if tc.ct != nil {
				tc.ct(&ct)
			}
			if got := conntrackSysctls(ct, tc.numCPU); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// fakeHost is a host whose /proc/sys and /sys are files in a directory.
func fakeHost(t *testing.T, files map[string]int) host {
	t.Helper()
	dir := t.TempDir()
	h := host{
		procSys:     filepath.Join(dir, "proc", "sys"),
		hashsize:    filepath.Join(dir, "sys", "hashsize"),
		oomScoreAdj: filepath.Join(dir, "oom_score_adj"),
		numCPU:      2,
	}
	if err := os.MkdirAll(filepath.Join(h.procSys, "net", "netfilter"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(h.hashsize), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		p := filepath.Join(h.procSys, "net", "netfilter", name)
		switch name {
		case "hashsize":
			p = h.hashsize
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

func TestApplyConntrack(t *testing.T) {
	ct := config.Default().Linux.Conntrack
	t.Run("writes the sysctls and grows the hash table", func(t *testing.T) {
		h := fakeHost(t, map[string]int{"nf_conntrack_max": 65536, "nf_conntrack_tcp_timeout_established": 432000,
			"nf_conntrack_tcp_timeout_close_wait": 60, "hashsize": 16384})
		if err := h.applyConntrack(context.Background(), ct); err != nil {
			t.Fatal(err)
		}
		nf := filepath.Join(h.procSys, "net", "netfilter")
		for p, want := range map[string]string{filepath.Join(nf, "nf_conntrack_max"): "131072", filepath.Join(nf, "nf_conntrack_tcp_timeout_established"): "86400",
			filepath.Join(nf, "nf_conntrack_tcp_timeout_close_wait"): "3600", h.hashsize: "32768"} {
			if got := readFile(t, p); got != want {
				t.Errorf("%s = %s, want %s", p, got, want)
			}
		}
	})
	t.Run("sysctls that do not exist here are skipped, and the hash table is then left alone", func(t *testing.T) {
		h := fakeHost(t, map[string]int{"nf_conntrack_tcp_timeout_established": 1, "hashsize": 16})
		if err := h.applyConntrack(context.Background(), ct); err != nil {
			t.Fatalf("applyConntrack: %v, want missing sysctls skipped", err)
		}
		nf := filepath.Join(h.procSys, "net", "netfilter")
		if got := readFile(t, filepath.Join(nf, "nf_conntrack_tcp_timeout_established")); got != "86400" {
			t.Errorf("the settable sysctl was not set: %s", got)
		}
		if got := readFile(t, h.hashsize); got != "16" {
			t.Errorf("hashsize = %s: touched although nf_conntrack_max was not set", got)
		}
	})
	t.Run("an unchanged hash table large enough is not written", func(t *testing.T) {
		h := fakeHost(t, map[string]int{"nf_conntrack_max": 1, "hashsize": 1 << 20})
		if err := h.applyConntrack(context.Background(), ct); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, h.hashsize); got != strconv.Itoa(1<<20) {
			t.Errorf("hashsize = %s", got)
		}
	})
	t.Run("other failures are errors", func(t *testing.T) {
		h := fakeHost(t, nil)
		// A directory where a sysctl should be: not a permission problem.
		if err := os.Mkdir(filepath.Join(h.procSys, "net", "netfilter", "nf_conntrack_max"), 0o755); err != nil {
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
