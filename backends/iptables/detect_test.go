package iptables

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// fakeSaves answers iptables-save commands from canned output: "name" for
// the whole save, "name -t mangle" for the mangle table. A command with no
// entry fails, as a binary that is not installed does.
type fakeSaves struct {
	out   map[string]string
	calls []string
}

func (f *fakeSaves) save(_ context.Context, name string, args ...string) ([]byte, error) {
	cmd := strings.Join(append([]string{name}, args...), " ")
	f.calls = append(f.calls, cmd)
	out, ok := f.out[cmd]
	if !ok {
		return nil, errors.New(name + ": not found")
	}
	return []byte(out), nil
}

const (
	emptyMangle = "*mangle\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
	hintMangle  = "*mangle\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
	canaryTable = "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"
	noRules     = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"
	threeRules  = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\n-A INPUT -j DROP\n-A OUTPUT -j ACCEPT\nCOMMIT\n"
	oneRule     = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\nCOMMIT\n"
	// A chain whose name only starts like kubelet's is not its hint.
	lookalike = "*mangle\n:KUBE-IPTABLES-HINTS - [0:0]\nCOMMIT\n"
)

func TestDetectVariant(t *testing.T) {
	// Saves of both variants, both families, that tests override.
	base := func(over map[string]string) map[string]string {
		m := map[string]string{
			"iptables-nft-save -t mangle":  emptyMangle,
			"ip6tables-nft-save -t mangle": emptyMangle,
			"iptables-nft-save":            noRules,
			"ip6tables-nft-save":           noRules,
			"iptables-legacy-save":         noRules,
			"ip6tables-legacy-save":        noRules,
		}
		for k, v := range over {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name string
		out  map[string]string
		want string // "" when detection fails
	}{
		{"kubelet's hint in the nft mangle table wins over more legacy rules", base(map[string]string{
			"iptables-nft-save -t mangle": hintMangle, "iptables-legacy-save": threeRules,
		}), "nft"},
		{"kubelet's hint in the IPv6 nft mangle table is enough", base(map[string]string{
			"ip6tables-nft-save -t mangle": hintMangle, "iptables-legacy-save": threeRules,
		}), "nft"},
		{"kubelet's canary chain counts as its hint", base(map[string]string{
			"ip6tables-nft-save -t mangle": canaryTable, "ip6tables-legacy-save": threeRules,
		}), "nft"},
		{"kubelet's hint in the legacy tables wins over more nft rules", base(map[string]string{
			"iptables-legacy-save": hintMangle, "iptables-nft-save": threeRules,
		}), "legacy"},
		{"kubelet's hint in the IPv6 legacy tables is enough", base(map[string]string{
			"ip6tables-legacy-save": canaryTable, "ip6tables-nft-save": threeRules,
		}), "legacy"},
		{"a hint in both variants: nft is checked first", base(map[string]string{
			"iptables-nft-save -t mangle": hintMangle, "iptables-legacy-save": hintMangle,
		}), "nft"},
		{"a chain named like the hint is not the hint", base(map[string]string{
			"iptables-nft-save -t mangle": lookalike, "iptables-legacy-save": oneRule,
		}), "legacy"},
		{"no hint: the variant holding more rules (legacy)", base(map[string]string{
			"iptables-legacy-save": threeRules, "ip6tables-nft-save": oneRule,
		}), "legacy"},
		{"no hint: the variant holding more rules (nft, counted over both families)", base(map[string]string{
			"iptables-legacy-save": threeRules, "iptables-nft-save": oneRule, "ip6tables-nft-save": threeRules,
		}), "nft"},
		{"only the nft binaries work", base(map[string]string{
			"iptables-legacy-save": "", "ip6tables-legacy-save": "",
		}), "nft"},
		{"only the legacy binaries work", base(map[string]string{
			"iptables-nft-save -t mangle": "", "ip6tables-nft-save -t mangle": "",
			"iptables-nft-save": "", "ip6tables-nft-save": "",
		}), "legacy"},
		{"no iptables at all", map[string]string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSaves{out: tc.out}
			got, err := detect(context.Background(), f.save)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("detected %q, want an error", got.name)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.name != tc.want {
				t.Errorf("detected %q, want %q (commands run: %q)", got.name, tc.want, f.calls)
			}
			// "iptables-legacy-save -t mangle" would create the legacy
			// mangle table in the kernel: never asked.
			for _, c := range f.calls {
				if strings.Contains(c, "legacy") && strings.Contains(c, "-t") {
					t.Errorf("ran %q", c)
				}
			}
			// The nft hint is looked for first.
			if f.calls[0] != "iptables-nft-save -t mangle" {
				t.Errorf("first command %q, want the nft mangle save", f.calls[0])
			}
		})
	}
}
