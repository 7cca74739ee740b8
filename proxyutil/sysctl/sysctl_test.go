package sysctl

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tree makes a fake /proc/sys with the given files, and a hashsize file.
func tree(t *testing.T, files map[string]string) *Sysctl {
	t.Helper()
	dir := t.TempDir()
	for name, v := range files {
		p := filepath.Join(dir, "sys", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hs := filepath.Join(dir, "hashsize")
	if err := os.WriteFile(hs, []byte("16384\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Sysctl{Root: filepath.Join(dir, "sys"), Hashsize: hs, NumCPU: func() int { return 4 }}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGetSetEnsure(t *testing.T) {
	s := tree(t, map[string]string{"net/ipv4/conf/all/route_localnet": "0\n", "net/ipv4/ip_forward": "1\n"})
	if v, err := s.Get("net/ipv4/conf/all/route_localnet"); err != nil || v != "0" {
		t.Errorf("Get = %q, %v", v, err)
	}
	if v, err := s.GetInt("net.ipv4.ip_forward"); err != nil || v != 1 {
		t.Errorf("GetInt of a dotted name = %d, %v", v, err)
	}
	changed, err := s.Ensure("net/ipv4/conf/all/route_localnet", 1)
	if err != nil || !changed {
		t.Fatalf("Ensure = %v, %v; want a write", changed, err)
	}
	if v, _ := s.GetInt("net/ipv4/conf/all/route_localnet"); v != 1 {
		t.Errorf("after Ensure: %d", v)
	}
	changed, err = s.Ensure("net.ipv4.ip_forward", 1)
	if err != nil || changed {
		t.Errorf("Ensure of an equal value = %v, %v; want no write", changed, err)
	}
	if got := read(t, filepath.Join(s.Root, "net/ipv4/ip_forward")); got != "1\n" {
		t.Errorf("an equal value was rewritten: %q", got)
	}
}

func TestMissingParameter(t *testing.T) {
	s := tree(t, map[string]string{"net/ipv4/ip_forward": "1\n"})
	err := s.Set("net/netfilter/nf_conntrack_max", "1")
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no such parameter") {
		t.Errorf("Set of a missing parameter: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Root, "net/netfilter/nf_conntrack_max")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Set created a file: %v", err)
	}
	if _, err := s.Get("../../etc/passwd"); err == nil {
		t.Errorf("a name escaping the root was read")
	}
	if _, err := s.GetInt("net/ipv4/ip_forward/../ip_forward"); err != nil {
		t.Errorf("a clean-able name: %v", err)
	}
}

func TestNotAnInteger(t *testing.T) {
	s := tree(t, map[string]string{"kernel/hostname": "node-1\n"})
	if _, err := s.GetInt("kernel/hostname"); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("GetInt of a string: %v", err)
	}
}

func TestConntrackMax(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Conntrack
		numCPU int
		want   int
	}{
		{"unset leaves the kernel's value", Conntrack{Min: 131072}, 4, 0},
		{"per core times CPUs", Conntrack{MaxPerCore: 32768, Min: 131072}, 8, 262144},
		{"min wins on a small machine", Conntrack{MaxPerCore: 32768, Min: 131072}, 2, 131072},
		{"no min", Conntrack{MaxPerCore: 1000}, 3, 3000},
		{"capped at 1M on a huge machine", Conntrack{MaxPerCore: 32768, Min: 131072}, 256, 1 << 20},
		{"the cap wins over min too", Conntrack{MaxPerCore: 1 << 20, Min: 1 << 22}, 2, 1 << 20},
		{"negative per core is unset", Conntrack{MaxPerCore: -1, Min: 5}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ConntrackMax(tc.cfg, tc.numCPU); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestApplyConntrack(t *testing.T) {
	nf := "net/netfilter/"
	s := tree(t, map[string]string{
		nf + "nf_conntrack_max":                     "65536\n",
		nf + "nf_conntrack_tcp_timeout_established": "432000\n",
		nf + "nf_conntrack_tcp_timeout_close_wait":  "60\n",
		nf + "nf_conntrack_tcp_be_liberal":          "0\n",
		nf + "nf_conntrack_udp_timeout":             "30\n",
		nf + "nf_conntrack_udp_timeout_stream":      "120\n",
	})
	err := s.ApplyConntrack(context.Background(), Conntrack{
		MaxPerCore: 32768, Min: 131072, // 4 CPUs: 131072
		TCPEstablishedTimeout: 24 * time.Hour,
		TCPCloseWaitTimeout:   time.Hour,
		TCPBeLiberal:          true,
		UDPTimeout:            30 * time.Second, // already so: not rewritten
		UDPStreamTimeout:      0,                // unset: left alone
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"nf_conntrack_max":                     "131072",
		"nf_conntrack_tcp_timeout_established": "86400",
		"nf_conntrack_tcp_timeout_close_wait":  "3600",
		"nf_conntrack_tcp_be_liberal":          "1",
		"nf_conntrack_udp_timeout":             "30\n",
		"nf_conntrack_udp_timeout_stream":      "120\n",
	} {
		if got := read(t, filepath.Join(s.Root, nf+name)); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	// 131072/4 = 32768 > 16384: the hash table grows.
	if got := read(t, s.Hashsize); got != "32768" {
		t.Errorf("hashsize = %q, want 32768", got)
	}

	// A large enough hash table is left alone.
	if err := os.WriteFile(s.Hashsize, []byte("65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyConntrack(context.Background(), Conntrack{MaxPerCore: 32768}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s.Hashsize); got != "65536\n" {
		t.Errorf("hashsize rewritten: %q", got)
	}
}

func TestApplyConntrackStopsAtMissingParameter(t *testing.T) {
	s := tree(t, map[string]string{})
	err := s.ApplyConntrack(context.Background(), Conntrack{TCPEstablishedTimeout: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "nf_conntrack_tcp_timeout_established") {
		t.Errorf("error %v, want one naming the parameter", err)
	}
	if err := s.ApplyConntrack(context.Background(), Conntrack{}); err != nil {
		t.Errorf("an empty configuration touches nothing, got %v", err)
	}
}

func TestCountCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-1\n": 2, "0-3,8,10-11": 7, "": 0} {
		if got, err := countCPUList(in); err != nil || got != want {
			t.Errorf("countCPUList(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "3-1", "0-x", "1,-"} {
		if _, err := countCPUList(in); err == nil {
			t.Errorf("countCPUList(%q): no error", in)
		}
	}
}

func FuzzCountCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3,8,10-11", "3-1", "", "1,,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := countCPUList(s)
		if err == nil && n < 0 {
			t.Errorf("countCPUList(%q) = %d", s, n)
		}
	})
}
