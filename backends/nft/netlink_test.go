package nft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
)

// fakeKernel answers netlink batches as the kernel does (one ack for the
// message that asks for it), records them, and fails them on demand.
type fakeKernel struct {
	batches [][]netlink.Message
	fail    syscall.Errno
}

func (k *fakeKernel) dial() (*netlink.Conn, error) {
	return nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
		if len(req) == 0 {
			return nil, nil
		}
		k.batches = append(k.batches, req)
		for _, m := range req {
			if m.Header.Flags&netlink.Acknowledge == 0 {
				continue
			}
			if k.fail != 0 {
				return nltest.Error(int(k.fail), []netlink.Message{m})
			}
			return nltest.Error(0, []netlink.Message{m})
		}
		return nil, nil
	}), nil
}

// netlinkFixture is a fixture whose incremental transactions go to a fake
// kernel through netlink (the knftables fakes see only the others).
func netlinkFixture(t *testing.T, cfg Config) (*fixture, *fakeKernel) {
	f := newFixture(t, cfg)
	k := &fakeKernel{}
	for _, tb := range f.b.tables {
		tb.nl = newNLTable(tb.fam, cfg.Table)
		tb.nl.dial = k.dial
	}
	return f, k
}

// TestNetlinkPath: the incremental syncs of every kind go through netlink
// in one batch each (begin, messages, end; only the last message asks for
// an ack); only source ranges reaching the end of the address space fall
// back to nft.
func TestNetlinkPath(t *testing.T) {
	f, k := netlinkFixture(t, testConfig())
	f.set(richServices()...)
	if len(k.batches) != 0 || f.b.Last[0].Netlink {
		t.Fatalf("the first (full) sync went through netlink")
	}
	for _, step := range netlinkSteps() {
		before := len(k.batches)
		step.do(f)
		checkPath(t, step.name, f.b.Last, step.fallback)
		want := 0
		for _, st := range f.b.Last {
			if st.Netlink {
				want++
			}
			if st.StaleDeleted > 0 {
				want++ // a batch of their own (see deleteStale)
			}
		}
		if got := len(k.batches) - before; got != want {
			t.Errorf("%s: %d netlink batches, want %d", step.name, got, want)
		}
	}
	for i, b := range k.batches {
		if b[0].Header.Type != unix.NFNL_MSG_BATCH_BEGIN || b[len(b)-1].Header.Type != unix.NFNL_MSG_BATCH_END {
			t.Errorf("batch %d is not framed by batch begin and end", i)
		}
		for j, m := range b {
			if ack := m.Header.Flags&netlink.Acknowledge != 0; ack != (j == len(b)-2) {
				t.Errorf("batch %d message %d: ack %v", i, j, ack)
			}
		}
	}
}

// TestNetlinkFailureResets: a batch the kernel refuses fails the sync, the
// mirror stays as it was, and the next sync is a full one (read the table
// back, write the difference with nft): never a half-applied dataplane.
func TestNetlinkFailureResets(t *testing.T) {
	f, k := netlinkFixture(t, testConfig())
	f.set(richServices()...)
	k.fail = unix.ENOENT
	web := clone(richServices()[0])
	web.Endpoints[1].Ip = "10.0.2.99"
	f.state.Services[backend.KeyOf(web)] = web
	err := f.b.Sync(t.Context(), f.state, backend.Changes{Set: []backend.ServiceKey{backend.KeyOf(web)}})
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("Sync: %v, want the kernel's error", err)
	}
	k.fail = 0
	f.sync(backend.Changes{})
	if st := f.b.Last[0]; !st.Full || st.Netlink || st.Operations == 0 {
		t.Fatalf("after a failed netlink batch: %+v, want a full sync written by nft", st)
	}
	if !strings.Contains(dump(f.fake4), "10.0.2.99") {
		t.Fatalf("the change was not written by the full sync:\n%s", dump(f.fake4))
	}
}

// TestNetlinkRuleShapes lists which rules the netlink path writes: every
// rule of service and endpoint chains; none of the fixed ruleset's (written
// only at full syncs, or when the node or flags change).
func TestNetlinkRuleShapes(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"ClusterCIDR", func(*Config) {}},
		{"ClusterCIDR /14", func(c *Config) { c.ClusterCIDRs = []string{"10.0.0.0/14", "fd01::/60"} }},
		{"InterfaceNamePrefix", func(c *Config) {
			c.DetectLocalMode, c.PodInterfaceNamePrefix = host.LocalModeInterfaceNamePrefix, "veth"
		}},
		{"BridgeInterface", func(c *Config) { c.DetectLocalMode, c.PodBridgeInterface = host.LocalModeBridgeInterface, "cbr0" }},
	} {
		cfg := testConfig()
		mode.cfg(&cfg)
		f := newFixture(t, cfg)
		f.set(richServices()...)
		for _, tb := range f.b.tables {
			for _, pt := range tb.parts {
				for _, c := range pt.chains {
					for _, r := range c.rules {
						b := &batch{fam: tb.fam, table: "kpng", newIDs: map[string]uint32{}, anonName: func() string { return "__map-test" }}
						err := b.rule(&knftables.Rule{Chain: c.name, Rule: r.text}, r.spec)
						want := isServiceChain(c.name)
						if (err == nil) != want {
							t.Errorf("%s: %s: chain %s: rule %q: translated %v, want %v (%v)", mode.name, tb.fam, c.name, r.text, err == nil, want, err)
						}
					}
				}
			}
		}
	}
}

// TestNetlinkExpressions: the expressions of each rule shape, as
// `nft --debug=netlink` (nft 1.0.6) shows what it compiles them into.
func TestNetlinkExpressions(t *testing.T) {
	ap, pfx := netip.MustParseAddrPort, netip.MustParsePrefix
	for _, tc := range []struct {
		fam  family
		rule ruleSpec
		text string // the rule as nft reads it, rendered from the same value
		want string
	}{
		{ipv4, endpointMapDNAT{ipv4, "tcp", "ep-x"}, "meta l4proto tcp dnat ip to numgen random mod 65536 map @ep-x",
			"meta l4proto reg 1; cmp eq reg 1 06; numgen reg 1 random mod 65536; byteorder reg 1 = hton(reg 1, 4, 4); lookup reg 1 set ep-x dreg 1; nat dnat fam 2 addr reg 1 proto reg 9 flags 0"},
		{ipv6, endpointMapDNAT{ipv6, "udp", "ep-x"}, "meta l4proto udp dnat ip6 to numgen random mod 65536 map @ep-x",
			"meta l4proto reg 1; cmp eq reg 1 11; numgen reg 1 random mod 65536; byteorder reg 1 = hton(reg 1, 4, 4); lookup reg 1 set ep-x dreg 1; nat dnat fam 10 addr reg 1 proto reg 2 flags 0"},
		{ipv4, dnatMap{ipv4, "tcp", []netip.AddrPort{ap("10.0.1.5:8080"), ap("10.0.2.5:8080")}},
			"meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.0.1.5 . 8080, 1 : 10.0.2.5 . 8080 }",
			"meta l4proto reg 1; cmp eq reg 1 06; numgen reg 1 random mod 2; lookup reg 1 set __map-test dreg 1; nat dnat fam 2 addr reg 1 proto reg 9 flags 0"},
		{ipv6, dnatMap{ipv6, "udp", []netip.AddrPort{ap("[fd01::5]:53")}}, "meta l4proto udp dnat ip6 addr . port to numgen random mod 1 map { 0 : fd01::5 . 53 }",
			"meta l4proto reg 1; cmp eq reg 1 11; numgen reg 1 random mod 1; lookup reg 1 set __map-test dreg 1; nat dnat fam 10 addr reg 1 proto reg 2 flags 0"},
		{ipv4, vmapGoto{[]string{"endpoint-a", "endpoint-b"}}, "numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }",
			"numgen reg 1 random mod 2; lookup reg 1 set __map-test dreg 0"},
		{ipv4, saddrSetGoto{ipv4, "affinity-a", "endpoint-a"}, "ip saddr @affinity-a goto endpoint-a",
			"payload load 4b @ network + 12 => reg 1; lookup reg 1 set affinity-a; goto endpoint-a"},
		{ipv6, updateSaddr{ipv6, "affinity-a"}, "update @affinity-a { ip6 saddr }", "payload load 16b @ network + 8 => reg 1; dynset update reg 1 set affinity-a"},
		{ipv4, dnatTo{"tcp", ap("10.0.2.8:80")}, "meta l4proto tcp dnat to 10.0.2.8:80",
			"meta l4proto reg 1; cmp eq reg 1 06; immediate reg 1 0a000208; immediate reg 2 0050; nat dnat fam 2 addr reg 1 proto reg 2 flags 2"},
		{ipv6, dnatTo{"tcp", ap("[fd01:1::5]:8080")}, "meta l4proto tcp dnat to [fd01:1::5]:8080",
			"meta l4proto reg 1; cmp eq reg 1 06; immediate reg 1 fd010001000000000000000000000005; immediate reg 2 1f90; nat dnat fam 10 addr reg 1 proto reg 2 flags 2"},
		{ipv4, setMark{false, 0x4000}, "mark set mark or 0x00004000", "meta mark reg 1; bitwise reg 1 = (reg 1 & ffbfffff) ^ 00400000; meta set mark reg 1"},
		{ipv4, setMark{true, 0x4000}, "fib saddr type local mark set mark or 0x00004000",
			"fib saddr type => reg 1; cmp eq reg 1 02000000; meta mark reg 1; bitwise reg 1 = (reg 1 & ffbfffff) ^ 00400000; meta set mark reg 1"},
		{ipv4, gotoChain{true, "service-a"}, "fib saddr type local goto service-a", "fib saddr type => reg 1; cmp eq reg 1 02000000; goto service-a"},
		{ipv4, gotoChain{false, "service-a"}, "goto service-a", "goto service-a"},
		{ipv4, localGoto{ipv4, host.LocalTraffic{CIDR: pfx("10.0.0.0/16")}, "service-a"}, "ip saddr 10.0.0.0/16 goto service-a",
			"payload load 2b @ network + 12 => reg 1; cmp eq reg 1 0a00; goto service-a"},
		{ipv4, localGoto{ipv4, host.LocalTraffic{CIDR: pfx("10.0.0.0/20")}, "service-a"}, "ip saddr 10.0.0.0/20 goto service-a",
			"payload load 4b @ network + 12 => reg 1; bitwise reg 1 = (reg 1 & fffff000) ^ 00000000; cmp eq reg 1 0a000000; goto service-a"},
		{ipv4, localGoto{ipv4, host.LocalTraffic{CIDR: pfx("10.1.2.3/32")}, "service-a"}, "ip saddr 10.1.2.3/32 goto service-a",
			"payload load 4b @ network + 12 => reg 1; cmp eq reg 1 0a010203; goto service-a"},
		{ipv6, localGoto{ipv6, host.LocalTraffic{CIDR: pfx("fd01::/48")}, "service-a"}, "ip6 saddr fd01::/48 goto service-a",
			"payload load 6b @ network + 8 => reg 1; cmp eq reg 1 fd0100000000; goto service-a"},
		{ipv6, localGoto{ipv6, host.LocalTraffic{CIDR: pfx("fd01::/60")}, "service-a"}, "ip6 saddr fd01::/60 goto service-a",
			"payload load 16b @ network + 8 => reg 1; bitwise reg 1 = (reg 1 & fffffffffffffff00000000000000000) ^ 00000000000000000000000000000000; cmp eq reg 1 fd010000000000000000000000000000; goto service-a"},
		{ipv4, localGoto{ipv4, host.LocalTraffic{Interface: "cbr0"}, "service-a"}, "iifname cbr0 goto service-a",
			"meta iifname reg 1; cmp eq reg 1 63627230000000000000000000000000; goto service-a"},
		{ipv4, localGoto{ipv4, host.LocalTraffic{InterfacePrefix: "veth"}, "service-a"}, "iifname veth* goto service-a",
			"meta iifname reg 1; cmp eq reg 1 76657468; goto service-a"},
	} {
		if got := tc.rule.text(); got != tc.text {
			t.Errorf("%#v: text %q, want %q", tc.rule, got, tc.text)
		}
		b := &batch{fam: tc.fam, table: "kpng", newIDs: map[string]uint32{}, anonName: func() string { return "__map-test" }}
		exprs, err := tc.rule.exprs(b)
		if err != nil {
			t.Errorf("%q: %v", tc.text, err)
			continue
		}
		if got := describe(exprs); got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.text, got, tc.want)
		}
	}
}

// describe renders expressions briefly, in nft --debug=netlink's terms
// (data in wire byte order).
func describe(exprs []expr.Any) string {
	var out []string
	for _, e := range exprs {
		switch x := e.(type) {
		case *expr.Meta:
			key := map[expr.MetaKey]string{expr.MetaKeyL4PROTO: "l4proto", expr.MetaKeyMARK: "mark", expr.MetaKeyIIFNAME: "iifname"}[x.Key]
			if x.SourceRegister {
				out = append(out, fmt.Sprintf("meta set %s reg %d", key, x.Register))
			} else {
				out = append(out, fmt.Sprintf("meta %s reg %d", key, x.Register))
			}
		case *expr.Cmp:
			out = append(out, fmt.Sprintf("cmp eq reg %d %x", x.Register, x.Data))
		case *expr.Numgen:
			out = append(out, fmt.Sprintf("numgen reg %d random mod %d", x.Register, x.Modulus))
		case *expr.Lookup:
			s := fmt.Sprintf("lookup reg %d set %s", x.SourceRegister, x.SetName)
			if x.IsDestRegSet {
				s += fmt.Sprintf(" dreg %d", x.DestRegister)
			}
			out = append(out, s)
		case *expr.NAT:
			flags := 0
			if x.Specified {
				flags = 2
			}
			out = append(out, fmt.Sprintf("nat dnat fam %d addr reg %d proto reg %d flags %d", x.Family, x.RegAddrMin, x.RegProtoMin, flags))
		case *expr.Payload:
			out = append(out, fmt.Sprintf("payload load %db @ network + %d => reg %d", x.Len, x.Offset, x.DestRegister))
		case *expr.Verdict:
			out = append(out, "goto "+x.Chain)
		case *expr.Dynset:
			out = append(out, fmt.Sprintf("dynset update reg %d set %s", x.SrcRegKey, x.SetName))
		case *expr.Immediate:
			out = append(out, fmt.Sprintf("immediate reg %d %x", x.Register, x.Data))
		case *expr.Bitwise:
			out = append(out, fmt.Sprintf("bitwise reg %d = (reg %d & %x) ^ %x", x.DestRegister, x.SourceRegister, x.Mask, x.Xor))
		case *expr.Fib:
			out = append(out, fmt.Sprintf("fib saddr type => reg %d", x.Register))
		case *expr.Byteorder:
			out = append(out, fmt.Sprintf("byteorder reg %d = hton(reg %d, %d, %d)", x.DestRegister, x.SourceRegister, x.Size, x.Len))
		default:
			out = append(out, fmt.Sprintf("%T", e))
		}
	}
	return strings.Join(out, "; ")
}

// exprsOf translates r, for a table of cases that look at the messages.
func exprsOf(r ruleSpec) func(b *batch) error {
	return func(b *batch) error {
		_, err := r.exprs(b)
		return err
	}
}

// TestNetlinkSetMessages: the sets the netlink path creates carry the
// attributes nft 1.0.6 sends for them (captured with nft --debug=mnl),
// user data included: nft reads it back to print the elements.
func TestNetlinkSetMessages(t *testing.T) {
	le := binary.NativeEndian.AppendUint32
	for _, tc := range []struct {
		name string
		fam  family
		op   func(b *batch) error
		want map[uint16][]byte // NFTA_SET_* of the NEWSET message
	}{
		{"dnat map, IPv4", ipv4, exprsOf(dnatMap{ipv4, "tcp", []netip.AddrPort{netip.MustParseAddrPort("10.0.1.5:8080"), netip.MustParseAddrPort("10.0.2.5:8080")}}), map[uint16][]byte{
			unix.NFTA_SET_FLAGS: be32(0xb), unix.NFTA_SET_KEY_TYPE: be32(4), unix.NFTA_SET_KEY_LEN: be32(4),
			unix.NFTA_SET_DATA_TYPE: be32(0x1cd), unix.NFTA_SET_DATA_LEN: be32(8),
			unix.NFTA_SET_USERDATA: append(append(append([]byte{0, 4}, le(nil, 1)...), append([]byte{1, 4}, le(nil, 0)...)...), append([]byte{6, 4}, le(nil, 0)...)...),
		}},
		{"dnat map, IPv6", ipv6, exprsOf(dnatMap{ipv6, "tcp", []netip.AddrPort{netip.MustParseAddrPort("[fd01::5]:8080"), netip.MustParseAddrPort("[fd01::6]:8080")}}), map[uint16][]byte{
			unix.NFTA_SET_FLAGS: be32(0xb), unix.NFTA_SET_KEY_TYPE: be32(4), unix.NFTA_SET_KEY_LEN: be32(4),
			unix.NFTA_SET_DATA_TYPE: be32(0x20d), unix.NFTA_SET_DATA_LEN: be32(20),
		}},
		{"verdict map", ipv4, exprsOf(vmapGoto{[]string{"d", "d"}}), map[uint16][]byte{
			unix.NFTA_SET_FLAGS: be32(0xb), unix.NFTA_SET_KEY_TYPE: be32(4), unix.NFTA_SET_KEY_LEN: be32(4),
			unix.NFTA_SET_DATA_TYPE: be32(0xffffff00), unix.NFTA_SET_DATA_LEN: be32(0),
			unix.NFTA_SET_USERDATA: append(append(append(append([]byte{0, 4}, le(nil, 1)...), append([]byte{1, 4}, le(nil, 0)...)...),
				append([]byte{4, 8, 0, 4}, append(le(nil, 1), 1, 0)...)...), append([]byte{6, 4}, le(nil, 0)...)...),
		}},
		{"source ranges, IPv4", ipv4, exprsOf(sourceRangesDrop{ipv4, []string{"192.168.0.0/24", "203.0.113.0/24", "203.0.113.7"}}), map[uint16][]byte{
			unix.NFTA_SET_FLAGS: be32(7), unix.NFTA_SET_KEY_TYPE: be32(7), unix.NFTA_SET_KEY_LEN: be32(4),
			unix.NFTA_SET_DESC:     {8, 0, 1, 0, 0, 0, 0, 5},
			unix.NFTA_SET_USERDATA: {0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 0x14, 0, 4, 7, 0, 0, 0, 1, 0x0c, 0, 4, 0x0c, 0, 0, 0, 1, 4, 0x0b, 0, 0, 0},
		}},
		{"source ranges, IPv6", ipv6, exprsOf(sourceRangesDrop{ipv6, []string{"2001:db8::/64", "2001:db8:0:2::/64"}}), map[uint16][]byte{
			unix.NFTA_SET_FLAGS: be32(7), unix.NFTA_SET_KEY_TYPE: be32(8), unix.NFTA_SET_KEY_LEN: be32(16),
			unix.NFTA_SET_DESC:     {8, 0, 1, 0, 0, 0, 0, 5},
			unix.NFTA_SET_USERDATA: {0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 0x14, 0, 4, 7, 0, 0, 0, 1, 0x0c, 0, 4, 0x0d, 0, 0, 0, 1, 4, 0x08, 0, 0, 0},
		}},
		{"affinity set", ipv4, func(b *batch) error {
			return b.op(op{verb: opAdd, obj: &knftables.Set{Name: "aff", Type: "ipv4_addr",
				Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, Timeout: knftables.PtrTo(3 * time.Hour)}})
		}, map[uint16][]byte{
			unix.NFTA_SET_NAME: []byte("aff\x00"), unix.NFTA_SET_FLAGS: be32(0x30), unix.NFTA_SET_KEY_TYPE: be32(7), unix.NFTA_SET_KEY_LEN: be32(4),
			unix.NFTA_SET_TIMEOUT: binary.BigEndian.AppendUint64(nil, 10800000), unix.NFTA_SET_USERDATA: append([]byte{0, 4}, le(nil, 2)...),
		}},
	} {
		b := &batch{fam: tc.fam, table: "t", newIDs: map[string]uint32{}, anonName: func() string { return "__map-test" }}
		if err := tc.op(b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if b.msgs[0].Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWSET) {
			t.Fatalf("%s: first message is not NEWSET", tc.name)
		}
		got := attrs(t, b.msgs[0].Data[4:])
		for typ, want := range tc.want {
			if !bytes.Equal(got[typ], want) {
				t.Errorf("%s: attribute %d: %x, want %x", tc.name, typ, got[typ], want)
			}
		}
	}
}

// TestNetlinkElementMessage: a vmap element with a comment, as nft sends it.
func TestNetlinkElementMessage(t *testing.T) {
	b := &batch{fam: ipv4, table: "t", newIDs: map[string]uint32{}, sets: func(string) *set {
		return &set{name: "m", isMap: true, typ: "ipv4_addr . inet_proto . inet_service : verdict"}
	}}
	if err := b.op(op{verb: opAdd, obj: &knftables.Element{Map: "m", Key: []string{"10.0.0.1", "tcp", "80"}, Value: []string{"goto d"}, Comment: knftables.PtrTo("ns/x:p")}}); err != nil {
		t.Fatal(err)
	}
	// Captured from nft 1.0.6: add element ip t m { 10.0.0.1 . tcp . 80 comment "ns/x:p" : goto d }
	want := []byte{
		0x44, 0x00, 0x03, 0x80, // NFTA_SET_ELEM_LIST_ELEMENTS
		0x40, 0x00, 0x01, 0x80, // NFTA_LIST_ELEM
		0x14, 0x00, 0x01, 0x80, 0x10, 0x00, 0x01, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x06, 0x00, 0x00, 0x00, 0x00, 0x50, 0x00, 0x00, // key
		0x18, 0x00, 0x02, 0x80, 0x14, 0x00, 0x02, 0x80, 0x08, 0x00, 0x01, 0x00, 0xff, 0xff, 0xff, 0xfc, 0x06, 0x00, 0x02, 0x00, 'd', 0x00, 0x00, 0x00, // goto d
		0x0d, 0x00, 0x06, 0x00, 0x00, 0x07, 'n', 's', '/', 'x', ':', 'p', 0x00, 0x00, 0x00, 0x00, // comment
	}
	got := attrs(t, b.msgs[0].Data[4:])
	if el := got[unix.NFTA_SET_ELEM_LIST_ELEMENTS]; !bytes.Equal(el, want[4:]) {
		t.Errorf("elements:\n got %x\nwant %x", el, want[4:])
	}
}

// TestNetlinkSourceRangeElements: the interval set's elements, as nft 1.0.6
// sends them: an end at 0.0.0.0, then each merged range's first address and
// the address after it (an end).
func TestNetlinkSourceRangeElements(t *testing.T) {
	b := &batch{fam: ipv4, table: "t", newIDs: map[string]uint32{}, anonName: func() string { return "__map-test" }}
	if _, err := (sourceRangesDrop{ipv4, []string{"192.168.0.0/24", "203.0.113.0/24", "203.0.113.7"}}).exprs(b); err != nil {
		t.Fatal(err)
	}
	got := attrs(t, b.msgs[1].Data[4:])[unix.NFTA_SET_ELEM_LIST_ELEMENTS]
	end := []byte{8, 0, 3, 0, 0, 0, 0, 1}
	key := func(a ...byte) []byte { return append([]byte{12, 0, 1, 0x80, 8, 0, 1, 0}, a...) }
	elem := func(i byte, parts ...[]byte) []byte {
		body := bytes.Join(parts, nil)
		return append([]byte{byte(4 + len(body)), 0, i, 0x80}, body...)
	}
	want := bytes.Join([][]byte{
		elem(1, end, key(0, 0, 0, 0)),
		elem(2, key(192, 168, 0, 0)),
		elem(3, end, key(192, 168, 1, 0)),
		elem(4, key(203, 0, 113, 0)),
		elem(5, end, key(203, 0, 114, 0)),
	}, nil)
	if !bytes.Equal(got, want) {
		t.Errorf("elements:\n got %x\nwant %x", got, want)
	}
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// attrs decodes a message's attributes by type (nested flag dropped).
func attrs(t *testing.T, data []byte) map[uint16][]byte {
	t.Helper()
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16][]byte{}
	for ad.Next() {
		out[ad.Type()] = ad.Bytes()
	}
	if err := ad.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzRuleSpecs: typed rules built from any names, addresses and source
// ranges either translate into expressions that marshal, or are refused;
// nothing panics.
func FuzzRuleSpecs(f *testing.F) {
	f.Add("service-a", "10.0.2.8:80", "192.168.0.0/24, 203.0.113.7", false)
	f.Add("veth", "[fd01:1::5]:8080", "2001:db8::/64", true)
	f.Add("endpoint-a/b", "10.0.0.1:0", "0.0.0.0/0", false)
	f.Fuzz(func(t *testing.T, name, addrPort, ranges string, v6 bool) {
		fam := ipv4
		if v6 {
			fam = ipv6
		}
		to, _ := netip.ParseAddrPort(addrPort)
		cidr, _ := netip.ParsePrefix(ranges)
		specs := []ruleSpec{
			endpointMapDNAT{fam, name, name}, dnatMap{fam, "tcp", []netip.AddrPort{to}}, vmapGoto{[]string{name}},
			saddrSetGoto{fam, name, name}, updateSaddr{fam, name}, dnatTo{"udp", to}, gotoChain{true, name},
			localGoto{fam, host.LocalTraffic{Interface: name}, "c"}, localGoto{fam, host.LocalTraffic{InterfacePrefix: name}, "c"},
			localGoto{fam, host.LocalTraffic{CIDR: cidr}, name}, sourceRangesDrop{fam, strings.Split(ranges, ", ")},
		}
		for _, spec := range specs {
			b := &batch{fam: fam, table: "t", newIDs: map[string]uint32{}, anonName: func() string { return "__map-x" }}
			err := b.rule(&knftables.Rule{Chain: "c", Rule: spec.text()}, spec)
			var u *untranslatable
			if err != nil && !errors.As(err, &u) {
				t.Fatalf("%#v: %v", spec, err)
			}
		}
	})
}

// FuzzEncodeKey: element keys encode to the size of their type, or are
// refused.
func FuzzEncodeKey(f *testing.F) {
	f.Add("ipv4_addr . inet_proto . inet_service", "10.0.0.1 . tcp . 80")
	f.Add("ipv6_addr . ipv6_addr . inet_proto . inet_service", "fd00::1 . fd00::1 . udp . 53")
	f.Add("inet_proto . inet_service", "sctp . 30000")
	f.Fuzz(func(t *testing.T, typ, key string) {
		types := strings.Split(typ, " . ")
		b, err := encodeKey(types, splitKey(key))
		if err != nil {
			return
		}
		size := 0
		for _, ty := range types {
			n := map[string]int{"ipv4_addr": 4, "ipv6_addr": 16, "inet_proto": 1, "inet_service": 2}[ty]
			if len(types) > 1 {
				n = (n + 3) / 4 * 4
			}
			size += n
		}
		if len(b) != size {
			t.Fatalf("%q as %q: %d bytes, want %d", key, typ, len(b), size)
		}
	})
}
