package iptables

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// savedTables is iptables-save output of a full sync of a few services,
// with a rule of someone else's in a builtin chain.
func savedTables(t testing.TB) []byte {
	f := newFakeTables()
	p := newProxier(false, testConfig(), f)
	_, err := p.sync(context.Background(), newState(
		named("web", "10.96.0.10", nil, ep("10.244.1.5", 8080, true)),
		named("lb", "10.96.0.11", func(s *localv1.Service) {
			s.Type = localv1.ServiceType_LOAD_BALANCER
			s.Ports[0].NodePort = 30080
			s.LoadBalancerIps = []string{"203.0.113.7"}
			s.LoadBalancerSourceRanges = []string{"192.168.0.0/16"}
		}, ep("10.244.1.6", 8080, false))), backend.Changes{Reset: true})
	if err != nil {
		t.Fatal(err)
	}
	f.tables["filter"]["INPUT"] = append(f.tables["filter"]["INPUT"], "-j ACCEPT")
	return f.saved()
}

func TestParseSave(t *testing.T) {
	tables := parseSave(savedTables(t))
	nat, filter := tables["nat"], tables["filter"]
	for _, c := range []string{"PREROUTING", chainServices, chainMarkMasq, prefixSVC + hashName("ns/web:p", "tcp")} {
		if !nat.chains[c] {
			t.Errorf("nat chain %s not found", c)
		}
	}
	if !slices.Contains(filter.ownChains(), chainProxyFirewall) || slices.Contains(filter.ownChains(), "INPUT") {
		t.Errorf("filter's own chains: %v", filter.ownChains())
	}
	for _, r := range filter.rules {
		if strings.HasPrefix(r, "-A "+chainPrefix) {
			t.Errorf("a rule of kpng's own chain was kept: %s", r)
		}
	}
	jumps := filter.builtinJumps()
	if len(jumps) != len(jumpsOf("filter"))+len(firewallJumps) || slices.Contains(jumps, "-A INPUT -j ACCEPT") {
		t.Errorf("filter jumps: %q", jumps)
	}
	if len(nat.builtinJumps()) != len(jumpsOf("nat")) {
		t.Errorf("nat jumps: %q", nat.builtinJumps())
	}
}

func jumpsOf(tbl string) []builtinJump {
	var out []builtinJump
	for _, j := range jumps {
		if j.table == tbl {
			out = append(out, j)
		}
	}
	return out
}

// FuzzParseSave: any input parses without panicking; every jump found is
// a rule of a chain kpng does not own that targets one it does, and the
// cleanup input built from it names only kpng's chains and those jumps.
func FuzzParseSave(f *testing.F) {
	f.Add(savedTables(f))
	f.Add([]byte("*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j KPNG-SERVICES\nCOMMIT\n"))
	f.Add([]byte("*filter\n:\n-A\n-A X -j\n-A KPNG-X -g KPNG-Y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tables := parseSave(data)
		for name, tbl := range tables {
			for _, r := range tbl.builtinJumps() {
				c, target := ruleChain(r)
				if strings.HasPrefix(c, chainPrefix) || !strings.HasPrefix(target, chainPrefix) {
					t.Fatalf("%s: %q is not a jump from a foreign chain to kpng's", name, r)
				}
			}
			for _, c := range tbl.ownChains() {
				if !strings.HasPrefix(c, chainPrefix) {
					t.Fatalf("%s: own chain %q", name, c)
				}
			}
		}
		for _, l := range strings.Split(string(cleanupInput(data)), "\n") {
			switch {
			case l == "", l == "COMMIT", strings.HasPrefix(l, "*"):
			case strings.HasPrefix(l, ":"+chainPrefix), strings.HasPrefix(l, "-X "+chainPrefix):
			case strings.HasPrefix(l, "-D "):
				if _, target := ruleChain("-A" + l[2:]); !strings.HasPrefix(target, chainPrefix) {
					t.Fatalf("cleanup deletes a rule that is not a jump to kpng: %q", l)
				}
			default:
				t.Fatalf("unexpected cleanup line %q", l)
			}
		}
	})
}

// TestParseSaveInPieces: iptables-save's output parses the same whatever
// pieces it arrives in (a command's output is copied in chunks), a last
// line without its newline and CRLF line ends included.
func TestParseSaveInPieces(t *testing.T) {
	data := append(savedTables(t), "*mangle\r\n:KPNG-OLD - [0:0]\r\n-A OUTPUT -j KPNG-OLD\r\nCOMMIT"...)
	whole := parseSave(data)
	if !whole["mangle"].chains["KPNG-OLD"] || len(whole["mangle"].builtinJumps()) != 1 {
		t.Fatalf("the mangle table's CRLF lines were not read: %+v", whole["mangle"])
	}
	for _, size := range []int{1, 2, 7, 64, 4096} {
		var p saveParser
		for rest := data; len(rest) > 0; {
			n := min(size, len(rest))
			p.Write(rest[:n])
			rest = rest[n:]
		}
		if got := p.done(); !reflect.DeepEqual(got, whole) {
			t.Errorf("in pieces of %d bytes: %+v, want %+v", size, got, whole)
		}
	}
}
