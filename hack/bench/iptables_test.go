package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kpng/kpng/internal/netnstest"
)

func TestVariantTool(t *testing.T) {
	for tool, want := range map[string]string{
		"iptables":          "iptables-legacy",
		"iptables-save":     "iptables-legacy-save",
		"ip6tables-restore": "ip6tables-legacy-restore",
	} {
		if got := variantTool(tool, "legacy"); got != want {
			t.Errorf("variantTool(%q) = %q, want %q", tool, got, want)
		}
	}
}

// The directory put first in a proxy's PATH makes `iptables` and its
// companions the chosen variant's, as kube-proxy runs them: by name.
func TestIptablesPathDir(t *testing.T) {
	for _, variant := range []string{"legacy", "nft"} {
		t.Run(variant, func(t *testing.T) {
			if _, err := lookSbin(variantTool("iptables", variant)); err != nil {
				t.Skip(err)
			}
			dir, err := iptablesPathDir(t.TempDir(), variant)
			if err != nil {
				t.Fatal(err)
			}
			for _, tool := range iptablesTools {
				if _, err := lookSbin(variantTool(tool, variant)); err != nil {
					continue // e.g. no ip6tables
				}
				// Looked up in the PATH of the process that runs it, as
				// kube-proxy does (exec.Command would use this test's).
				cmd := exec.Command("sh", "-c", tool+" --version")
				cmd.Env = proxyEnv(dir, filepath.Join(t.TempDir(), "lock"))
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s --version: %v: %s", tool, err, out)
				}
				want := map[string]string{"legacy": "(legacy)", "nft": "(nf_tables)"}[variant]
				if !strings.Contains(string(out), want) {
					t.Errorf("%s --version with the directory first in PATH: %q, want %s", tool, out, want)
				}
			}
			// Made again (a second size of the same run): no error.
			if _, err := iptablesPathDir(filepath.Dir(dir), variant); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestParseNftTables(t *testing.T) {
	out := "table ip kpngbench\ntable inet kube-proxy\n\ntable ip nat\n"
	if got, want := parseNftTables(out), []string{"ip kpngbench", "inet kube-proxy", "ip nat"}; !slices.Equal(got, want) {
		t.Errorf("parseNftTables = %v, want %v", got, want)
	}
	if got := parseNftTables(""); got != nil {
		t.Errorf("no tables: %v", got)
	}
}

// A proxy's rules are saved from its namespace in a form that loads again
// into an empty one: nft's ruleset and the legacy nat table.
func TestSaveRulesLoadsAgain(t *testing.T) {
	src, dst := netnstest.New(t, "save"), netnstest.New(t, "load")
	if _, err := src.RunInput("table ip kpngbench {\n"+
		"map ep {\ntypeof numgen random mod 65536 : ip daddr\nflags interval\nelements = { 0-32767 : 10.0.0.1, 32768-65535 : 10.0.0.2 }\n}\n"+
		"chain services {\nip daddr 10.96.0.1 dnat ip to numgen random mod 65536 map @ep\n}\n}\n", "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Run("iptables-legacy", "-t", "nat", "-N", "KUBE-SERVICES"); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(t.TempDir(), "proxy")
	if err := saveRules(src.Name, base, true, true); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Run("nft", "-f", base+".nft"); err != nil {
		t.Fatalf("the saved nft ruleset does not load: %v", err)
	}
	if out, err := dst.Run("nft", "list", "map", "ip", "kpngbench", "ep"); err != nil || !strings.Contains(out, "32768-65535 : 10.0.0.2") {
		t.Errorf("loaded map: %q, %v", out, err)
	}
	if _, err := dst.Run("iptables-legacy-restore", base+".iptables"); err != nil {
		t.Fatalf("the saved nat table does not load: %v", err)
	}
	if out, err := dst.Run("iptables-legacy", "-t", "nat", "-S", "KUBE-SERVICES"); err != nil || !strings.Contains(out, "-N KUBE-SERVICES") {
		t.Errorf("loaded nat table: %q, %v", out, err)
	}
	// And loaded alone by the bench, into a namespace of its own that it
	// deletes.
	ns := "kpbench-" + strconv.Itoa(os.Getpid()) + "-test-reload"
	l, err := reloadRules(ns, base, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if l.WallSeconds <= 0 || l.UserSeconds+l.SysSeconds < 0 {
		t.Errorf("load: %+v", l)
	}
	if names, _ := netnstest.List(ns); len(names) != 0 {
		t.Errorf("namespace %v left behind", names)
	}
	if _, err := reloadRules(ns, filepath.Join(t.TempDir(), "missing"), false, true); err == nil || !strings.Contains(err.Error(), "missing.nft") {
		t.Errorf("loading a missing file: %v, want an error naming it", err)
	}
	// Nothing asked, nothing written.
	other := filepath.Join(t.TempDir(), "none")
	if err := saveRules(src.Name, other, false, false); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(other + "*"); len(m) != 0 {
		t.Errorf("files written when none was asked for: %v", m)
	}
}
