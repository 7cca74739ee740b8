package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
