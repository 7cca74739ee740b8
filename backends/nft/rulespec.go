package nft

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/proxyutil/host"
)

// The rules of service and endpoint chains are typed values, built once
// (build.go) and rendered two ways from the same fields: as nft text, which
// the nft command, knftables' fake, the mirror's comparisons and the golden
// tests read, and as the netlink expressions nft 1.0.6 compiles that text
// into (what `nft --debug=netlink` shows), which the netlink path sends.
// Nothing parses rule text back. The rules of the fixed chains are text
// only; they are written by nft (a full sync).

// ruleSpec is a rule of a service or endpoint chain.
type ruleSpec interface {
	// text is the rule in nft syntax.
	text() string
	// exprs are the rule's expressions for b's family; an anonymous set or
	// map it uses is appended to b first. An untranslatable error sends the
	// transaction through nft instead.
	exprs(b *batch) ([]expr.Any, error)
}

// typed is the rule of spec, with a comment.
func typed(spec ruleSpec, comment string) rule {
	return rule{text: spec.text(), comment: comment, spec: spec}
}

// markHex is a packet mark as the rules print it ("0x00004000").
func markHex(mark uint32) string { return fmt.Sprintf("%#08x", mark) }

// familyIs refuses a rule built for another family than b's.
func familyIs(b *batch, f family) error {
	if b.fam != f {
		return cannot("a rule of %s in a %s batch", f, b.fam)
	}
	return nil
}

// names refuses names that are not chain or set names as we write them.
func names(ns ...string) error {
	for _, n := range ns {
		if !validName(n) {
			return cannot("name %q", n)
		}
	}
	return nil
}

// l4proto is "meta l4proto P", the start of the DNAT rules.
func l4proto(proto string) ([]expr.Any, error) {
	n, ok := protoNumber(proto)
	if !ok {
		return nil, cannot("protocol %q", proto)
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{n}},
	}, nil
}

// protoRegister is where a DNAT map's port lands: right after the address.
func (f family) protoRegister() uint32 {
	if f.model == ipv6.model {
		return reg2
	}
	return reg32_01
}

// endpointMapDNAT is a policy chain's rule: "meta l4proto P dnat ip to
// numgen random mod 65536 map @SET": the random slot, in network byte
// order (the map's intervals compare bytes), looked up for the address and
// port to DNAT to.
type endpointMapDNAT struct {
	fam   family
	proto string
	set   string
}

func (r endpointMapDNAT) text() string {
	return knftables.Concat("meta l4proto", r.proto, "dnat", r.fam.ipX, "to numgen random mod", endpointSlots, "map", "@"+r.set)
}

func (r endpointMapDNAT) exprs(b *batch) ([]expr.Any, error) {
	if err := firstErr(familyIs(b, r.fam), names(r.set)); err != nil {
		return nil, err
	}
	out, err := l4proto(r.proto)
	if err != nil {
		return nil, err
	}
	return append(out,
		&expr.Numgen{Register: reg1, Modulus: endpointSlots, Type: unix.NFT_NG_RANDOM},
		&expr.Byteorder{SourceRegister: reg1, DestRegister: reg1, Op: expr.ByteorderHton, Len: 4, Size: 4},
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: r.set, SetID: b.newIDs[r.set]},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(r.fam.nfproto()), RegAddrMin: reg1, RegProtoMin: r.fam.protoRegister()},
	), nil
}

// dnatMap is the rule of a policy chain with more endpoints than an
// endpoint map has slots: "meta l4proto P dnat ip addr . port to numgen
// random mod N map { 0 : A . P, ... }", an anonymous map of them all.
type dnatMap struct {
	fam     family
	proto   string
	targets []netip.AddrPort
}

func (r dnatMap) text() string {
	elems := make([]string, len(r.targets))
	for i, t := range r.targets {
		elems[i] = knftables.Concat(i, ":", t.Addr().String(), ".", t.Port())
	}
	return knftables.Concat("meta l4proto", r.proto, "dnat", r.fam.ipX, "addr . port to numgen random mod", len(r.targets),
		"map {", strings.Join(elems, ", "), "}")
}

func (r dnatMap) exprs(b *batch) ([]expr.Any, error) {
	if err := familyIs(b, r.fam); err != nil {
		return nil, err
	}
	if len(r.targets) == 0 {
		return nil, cannot("a DNAT map of no endpoint")
	}
	out, err := l4proto(r.proto)
	if err != nil {
		return nil, err
	}
	name, id, err := b.dnatMap(r.targets)
	if err != nil {
		return nil, err
	}
	return append(out,
		&expr.Numgen{Register: reg1, Modulus: uint32(len(r.targets)), Type: unix.NFT_NG_RANDOM},
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: name, SetID: id},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(r.fam.nfproto()), RegAddrMin: reg1, RegProtoMin: r.fam.protoRegister()},
	), nil
}

// vmapGoto is the last rule of a policy chain with affinity: "numgen random
// mod N vmap { 0 : goto C0 , ... }".
type vmapGoto struct {
	chains []string
}

func (r vmapGoto) text() string {
	elems := make([]string, len(r.chains))
	for i, c := range r.chains {
		elems[i] = knftables.Concat(i, ": goto", c)
	}
	// (" , ": a chain name followed by a comma reads as a different name
	// to knftables' fake.)
	return knftables.Concat("numgen random mod", len(r.chains), "vmap {", strings.Join(elems, " , "), "}")
}

func (r vmapGoto) exprs(b *batch) ([]expr.Any, error) {
	if len(r.chains) == 0 {
		return nil, cannot("a vmap of no chain")
	}
	if err := names(r.chains...); err != nil {
		return nil, err
	}
	name, id := b.vmap(r.chains)
	return []expr.Any{
		&expr.Numgen{Register: reg1, Modulus: uint32(len(r.chains)), Type: unix.NFT_NG_RANDOM},
		&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: name, SetID: id},
	}, nil
}

// saddrSetGoto sends a client back to its endpoint: "ip saddr @SET goto
// CHAIN".
type saddrSetGoto struct {
	fam        family
	set, chain string
}

func (r saddrSetGoto) text() string {
	return knftables.Concat(r.fam.ipX, "saddr", "@"+r.set, "goto", r.chain)
}

func (r saddrSetGoto) exprs(b *batch) ([]expr.Any, error) {
	if err := firstErr(familyIs(b, r.fam), names(r.set, r.chain)); err != nil {
		return nil, err
	}
	return []expr.Any{
		r.fam.saddr(r.fam.addrLen()),
		&expr.Lookup{SourceRegister: reg1, SetName: r.set, SetID: b.newIDs[r.set]},
		&expr.Verdict{Kind: expr.VerdictGoto, Chain: r.chain},
	}, nil
}

// updateSaddr records a client in an affinity set: "update @SET { ip saddr
// }".
type updateSaddr struct {
	fam family
	set string
}

func (r updateSaddr) text() string {
	return knftables.Concat("update", "@"+r.set, "{", r.fam.ipX, "saddr }")
}

func (r updateSaddr) exprs(b *batch) ([]expr.Any, error) {
	if err := firstErr(familyIs(b, r.fam), names(r.set)); err != nil {
		return nil, err
	}
	return []expr.Any{
		r.fam.saddr(r.fam.addrLen()),
		&expr.Dynset{SrcRegKey: reg1, Operation: unix.NFT_DYNSET_OP_UPDATE, SetName: r.set, SetID: b.newIDs[r.set]},
	}, nil
}

// dnatTo is an endpoint chain's rule: "meta l4proto P dnat to A:P".
type dnatTo struct {
	proto string
	to    netip.AddrPort
}

func (r dnatTo) text() string {
	return knftables.Concat("meta l4proto", r.proto, "dnat to", r.to.String())
}

func (r dnatTo) exprs(b *batch) ([]expr.Any, error) {
	a := r.to.Addr()
	if !b.fam.has(a) || a.Is4In6() || a.Zone() != "" {
		return nil, cannot("dnat to %q", r.to)
	}
	out, err := l4proto(r.proto)
	if err != nil {
		return nil, err
	}
	return append(out,
		&expr.Immediate{Register: reg1, Data: a.AsSlice()},
		&expr.Immediate{Register: reg2, Data: binary.BigEndian.AppendUint16(nil, r.to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(b.fam.nfproto()), RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
	), nil
}

// setMark asks for masquerading: "[fib saddr type local ]mark set mark or
// M", from the node itself only when fromNode.
type setMark struct {
	fromNode bool
	mark     uint32
}

func (r setMark) text() string {
	t := "mark set mark or " + markHex(r.mark)
	if r.fromNode {
		return "fib saddr type local " + t
	}
	return t
}

func (r setMark) exprs(*batch) ([]expr.Any, error) {
	var out []expr.Any
	if r.fromNode {
		out = fibLocal()
	}
	return append(out,
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ^r.mark), Xor: binary.NativeEndian.AppendUint32(nil, r.mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	), nil
}

// gotoChain is "[fib saddr type local ]goto CHAIN", from the node itself
// only when fromNode.
type gotoChain struct {
	fromNode bool
	chain    string
}

func (r gotoChain) text() string {
	if r.fromNode {
		return "fib saddr type local goto " + r.chain
	}
	return "goto " + r.chain
}

func (r gotoChain) exprs(*batch) ([]expr.Any, error) {
	if err := names(r.chain); err != nil {
		return nil, err
	}
	var out []expr.Any
	if r.fromNode {
		out = fibLocal()
	}
	return append(out, &expr.Verdict{Kind: expr.VerdictGoto, Chain: r.chain}), nil
}

// localMatch is how nft tells local traffic (host.DetectLocal's decision):
// "ip saddr CIDR", "iifname NAME" or "iifname PREFIX*"; nil when it cannot.
func localMatch(f family, l host.LocalTraffic) []string {
	switch {
	case l.CIDR.IsValid():
		return []string{f.ipX, "saddr", l.CIDR.String()}
	case l.Interface != "":
		return []string{"iifname", l.Interface}
	case l.InterfacePrefix != "":
		return []string{"iifname", l.InterfacePrefix + "*"}
	}
	return nil
}

// notLocalMatch is the negation of localMatch.
func notLocalMatch(f family, l host.LocalTraffic) []string {
	m := localMatch(f, l)
	if m == nil {
		return nil
	}
	return append(m[:len(m)-1:len(m)-1], "!=", m[len(m)-1])
}

// localGoto short-circuits local traffic: "MATCH goto CHAIN", MATCH being
// localMatch's.
type localGoto struct {
	fam   family
	local host.LocalTraffic
	chain string
}

func (r localGoto) text() string {
	return knftables.Concat(localMatch(r.fam, r.local), "goto", r.chain)
}

func (r localGoto) exprs(b *batch) ([]expr.Any, error) {
	if err := firstErr(familyIs(b, r.fam), names(r.chain)); err != nil {
		return nil, err
	}
	verdict := &expr.Verdict{Kind: expr.VerdictGoto, Chain: r.chain}
	switch l := r.local; {
	case l.CIDR.IsValid():
		p := l.CIDR
		if !r.fam.has(p.Addr()) || p.Addr().Is4In6() || p != p.Masked() {
			return nil, cannot("prefix %q", p)
		}
		return append(r.fam.saddrPrefix(p), verdict), nil
	case l.Interface != "" || l.InterfacePrefix != "":
		name := l.InterfacePrefix
		if l.Interface != "" {
			name = l.Interface
		}
		if !validIfname(name) {
			return nil, cannot("interface name %q", name)
		}
		data := []byte(name)
		if l.Interface != "" { // a whole name: compared with its padding
			data = append(data, make([]byte, unix.IFNAMSIZ-len(data))...)
		}
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: data},
			verdict,
		}, nil
	}
	return nil, cannot("no local traffic match")
}

// validIfname: an interface name (or prefix) that nft takes unquoted.
func validIfname(s string) bool {
	if s == "" || len(s) >= unix.IFNAMSIZ {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.@-", c) >= 0) {
			return false
		}
	}
	return true
}

// sourceRangesDrop is a firewall chain's rule: "ip saddr != { R, ... }
// drop", R a prefix or an address (see batch.sourceRanges).
type sourceRangesDrop struct {
	fam     family
	sources []string
}

func (r sourceRangesDrop) text() string {
	return knftables.Concat(r.fam.ipX, "saddr != {", strings.Join(r.sources, ", "), "} drop")
}

func (r sourceRangesDrop) exprs(b *batch) ([]expr.Any, error) {
	if err := familyIs(b, r.fam); err != nil {
		return nil, err
	}
	return b.sourceRanges(r.sources)
}

// firstErr is the first error of errs, if any.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
