package nft

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The netlink messages of rules (see rulespec.go for their expressions)
// and of the anonymous sets and maps they use. A rule without a typed form,
// such as the fixed ruleset's, is untranslatable: its transaction goes
// through nft.

// rule appends the messages of one "add rule" of the typed rule spec (nil:
// a rule with no typed form, which only nft writes).
func (b *batch) rule(r *knftables.Rule, spec ruleSpec) error {
	if spec == nil {
		return cannot("rule %q has no typed form", r.Rule)
	}
	exprs, err := spec.exprs(b)
	if err != nil {
		return err
	}
	var udata []byte
	if r.Comment != nil {
		if len(*r.Comment) > 250 {
			return cannot("comment of %d bytes", len(*r.Comment))
		}
		udata = udataString(nil, udataRuleComment, *r.Comment)
	}
	attrs := make([]netlink.Attribute, len(exprs))
	for i, e := range exprs {
		data, err := expr.Marshal(b.fam.nfproto(), e)
		if err != nil {
			return cannot("rule %q: %v", r.Rule, err)
		}
		attrs[i] = netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: data}
	}
	list, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return cannot("rule %q: %v", r.Rule, err)
	}
	b.msg(unix.NFT_MSG_NEWRULE, netlink.Create|netlink.Append, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_RULE_TABLE, b.table)
		ae.String(unix.NFTA_RULE_CHAIN, r.Chain)
		ae.Bytes(unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS, list)
		if udata != nil {
			ae.Bytes(unix.NFTA_RULE_USERDATA, udata)
		}
	})
	return nil
}

// anonElems adds the elements fill encodes to the anonymous set (or map)
// name, of id, that the batch creates.
func (b *batch) anonElems(name string, id uint32, fill func(ae *netlink.AttributeEncoder)) {
	b.msg(unix.NFT_MSG_NEWSETELEM, netlink.Create, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, b.table)
		ae.String(unix.NFTA_SET_ELEM_LIST_SET, name)
		ae.Uint32(unix.NFTA_SET_ELEM_LIST_SET_ID, id)
		ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(ae *netlink.AttributeEncoder) error {
			fill(ae)
			return nil
		})
	})
}

// sourceRanges is the loadBalancerSourceRanges rule: drop sources outside
// the listed prefixes and addresses. As nft does, one element is a plain
// comparison; more make an anonymous interval set, overlapping and adjacent
// ranges merged, each range its first address and (marked as an interval
// end) the address after its last. Ranges that start at the lowest address
// or end at the highest (nft encodes them differently) are left to nft.
func (b *batch) sourceRanges(list []string) ([]expr.Any, error) {
	f := b.fam
	type span struct{ lo, hi netip.Addr }
	var spans []span
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, cannot("source range %q", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !f.has(p.Addr()) || p.Addr().Is4In6() || p.Addr().Zone() != "" || p != p.Masked() {
			return nil, cannot("source range %q", s)
		}
		spans = append(spans, span{p.Addr(), lastAddr(p)})
	}
	if len(spans) == 1 {
		exprs := f.saddrPrefix(netip.PrefixFrom(spans[0].lo, prefixBits(spans[0].lo, spans[0].hi)))
		exprs[len(exprs)-1].(*expr.Cmp).Op = expr.CmpOpNeq
		return append(exprs, &expr.Verdict{Kind: expr.VerdictDrop}), nil
	}
	slices.SortFunc(spans, func(x, y span) int { return x.lo.Compare(y.lo) })
	merged := []span{spans[0]}
	for _, s := range spans[1:] {
		last := &merged[len(merged)-1]
		if next := last.hi.Next(); next.IsValid() && s.lo.Compare(next) > 0 {
			merged = append(merged, s)
		} else if s.hi.Compare(last.hi) > 0 {
			last.hi = s.hi
		}
	}
	if merged[0].lo.IsUnspecified() || !merged[len(merged)-1].hi.Next().IsValid() {
		return nil, cannot("source ranges %v reaching the ends of the address space", list)
	}

	// The key's "typeof" (ip saddr or ip6 saddr), in nft's encoding.
	proto, field := uint32(12), uint32(11)
	if f.model == ipv6.model {
		proto, field = 13, 8
	}
	inner := append(udataU32(nil, 0, proto), udataU32(nil, 1, field)...)
	typeOf := append(udataU32(nil, 0, 7), append([]byte{1, byte(len(inner))}, inner...)...)
	udata := udataU32(nil, udataSetKeyByteorder, byteorderBig)
	udata = udataU32(udata, udataSetMergeElements, 1)
	udata = append(append(udata, udataSetKeyTypeof, byte(len(typeOf))), typeOf...)

	id := b.newID("")
	name := "__set" + strings.TrimPrefix(b.anonName(), "__map")
	b.msg(unix.NFT_MSG_NEWSET, netlink.Create, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_TABLE, b.table)
		ae.String(unix.NFTA_SET_NAME, name)
		ae.Uint32(unix.NFTA_SET_FLAGS, unix.NFT_SET_ANONYMOUS|unix.NFT_SET_CONSTANT|unix.NFT_SET_INTERVAL)
		ae.Uint32(unix.NFTA_SET_KEY_TYPE, f.addrTypeID())
		ae.Uint32(unix.NFTA_SET_KEY_LEN, uint32(f.addrLen()))
		ae.Uint32(unix.NFTA_SET_ID, id)
		ae.Nested(unix.NFTA_SET_DESC, func(ae *netlink.AttributeEncoder) error {
			ae.Uint32(unix.NFTA_SET_DESC_SIZE, uint32(1+2*len(merged)))
			return nil
		})
		ae.Bytes(unix.NFTA_SET_USERDATA, udata)
	})
	b.anonElems(name, id, func(ae *netlink.AttributeEncoder) {
		n := uint16(0)
		elem := func(a netip.Addr, end bool) {
			n++
			ae.Nested(n, func(ae *netlink.AttributeEncoder) error {
				if end {
					ae.Uint32(unix.NFTA_SET_ELEM_FLAGS, unix.NFT_SET_ELEM_INTERVAL_END)
				}
				encodeElem(ae, a.AsSlice(), nil, nil)
				return nil
			})
		}
		// Below the first range: an interval end at the lowest address.
		zero := netip.IPv4Unspecified()
		if f.model == ipv6.model {
			zero = netip.IPv6Unspecified()
		}
		elem(zero, true)
		for _, s := range merged {
			elem(s.lo, false)
			elem(s.hi.Next(), true)
		}
	})
	return []expr.Any{
		f.saddr(f.addrLen()),
		&expr.Lookup{SourceRegister: reg1, SetName: name, SetID: id, Invert: true},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}, nil
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		if bits := p.Bits() - 8*i; bits < 8 {
			if bits < 0 {
				bits = 0
			}
			b[i] |= byte(0xff >> bits)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// prefixBits is the length of the prefix spanning exactly lo..hi.
func prefixBits(lo, hi netip.Addr) int {
	for bits := lo.BitLen(); bits >= 0; bits-- {
		if p := netip.PrefixFrom(lo, bits); p.Masked().Addr() == lo && lastAddr(p) == hi {
			return bits
		}
	}
	return lo.BitLen()
}

// fibLocal is "fib saddr type local".
func fibLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: reg1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.NativeEndian.AppendUint32(nil, unix.RTN_LOCAL)},
	}
}

// saddr loads the first n bytes of the source address.
func (f family) saddr(n int) *expr.Payload {
	off := uint32(12) // ip saddr
	if f.model == ipv6.model {
		off = 8
	}
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(n)}
}

// saddrPrefix matches the source address against a prefix as nft does: a
// prefix on a byte boundary loads and compares only its bytes; any other
// (and /0) masks the whole address.
func (f family) saddrPrefix(p netip.Prefix) []expr.Any {
	addr := p.Addr().AsSlice()
	bits := p.Bits()
	if bits%8 == 0 && bits > 0 {
		return []expr.Any{
			f.saddr(bits / 8),
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: addr[:bits/8]},
		}
	}
	mask := make([]byte, len(addr))
	for i := range mask {
		switch {
		case bits >= 8*(i+1):
			mask[i] = 0xff
		case bits > 8*i:
			mask[i] = byte(0xff << (8 - (bits - 8*i)))
		}
	}
	return []expr.Any{
		f.saddr(len(addr)),
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: uint32(len(addr)), Mask: mask, Xor: make([]byte, len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: addr},
	}
}

// anonMap appends an anonymous constant map keyed by numgen (a host-endian
// u32) and its elements; it returns the map's name and ID in the batch.
// (Elements are numbered from 1, as libnftnl does; the kernel ignores it.)
//
// nft names it "__map%d", and the kernel then picks the lowest free number
// by parsing the name of every set in the table: at 10,000 services, as
// long as the rest of such a transaction. We name it ourselves, uniquely
// (see nlTable.anonName); the kernel keeps the name as given, and nothing
// else differs (listings show anonymous maps inline, without their name).
func (b *batch) anonMap(dataType, dataLen uint32, udata []byte, n int, elems func(*netlink.AttributeEncoder)) (string, uint32) {
	id := b.newID("")
	name := b.anonName()
	b.msg(unix.NFT_MSG_NEWSET, netlink.Create, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_TABLE, b.table)
		ae.String(unix.NFTA_SET_NAME, name)
		ae.Uint32(unix.NFTA_SET_FLAGS, unix.NFT_SET_ANONYMOUS|unix.NFT_SET_CONSTANT|unix.NFT_SET_MAP)
		ae.Uint32(unix.NFTA_SET_KEY_TYPE, typeInteger)
		ae.Uint32(unix.NFTA_SET_KEY_LEN, 4)
		ae.Uint32(unix.NFTA_SET_DATA_TYPE, dataType)
		ae.Uint32(unix.NFTA_SET_DATA_LEN, dataLen)
		ae.Uint32(unix.NFTA_SET_ID, id)
		ae.Nested(unix.NFTA_SET_DESC, func(ae *netlink.AttributeEncoder) error {
			ae.Uint32(unix.NFTA_SET_DESC_SIZE, uint32(n))
			return nil
		})
		ae.Bytes(unix.NFTA_SET_USERDATA, udata)
	})
	b.anonElems(name, id, elems)
	return name, id
}

// dnatMap is the anonymous map of dnatMap's rule: slot i to targets[i].
func (b *batch) dnatMap(targets []netip.AddrPort) (string, uint32, error) {
	f := b.fam
	data := make([][]byte, len(targets))
	for i, t := range targets {
		a := t.Addr()
		if !f.has(a) || a.Is4In6() || a.Zone() != "" {
			return "", 0, cannot("map element %q", t)
		}
		d := binary.BigEndian.AppendUint16(a.AsSlice(), t.Port())
		data[i] = append(d, 0, 0)
	}
	dataType := uint32(typeIPv4Addr<<6 | typeInetService)
	if f.model == ipv6.model {
		dataType = typeIPv6Addr<<6 | typeInetService
	}
	udata := udataU32(nil, udataSetKeyByteorder, byteorderHost)
	udata = udataU32(udata, udataSetDataByteorder, byteorderInvalid)
	udata = udataU32(udata, udataSetDataInterval, 0)
	name, id := b.anonMap(dataType, uint32(f.addrLen()+4), udata, len(data), func(ae *netlink.AttributeEncoder) {
		for i, d := range data {
			ae.Nested(uint16(i+1), func(ae *netlink.AttributeEncoder) error {
				encodeElem(ae, binary.NativeEndian.AppendUint32(nil, uint32(i)), nil, d)
				return nil
			})
		}
	})
	return name, id, nil
}

// vmap is the anonymous map of vmapGoto's rule: slot i to "goto
// chains[i]".
func (b *batch) vmap(chains []string) (string, uint32) {
	udata := udataU32(nil, udataSetKeyByteorder, byteorderHost)
	udata = udataU32(udata, udataSetDataByteorder, byteorderInvalid)
	// The value's "typeof": a verdict expression (nft's own encoding).
	typeOf := udataU32(nil, 0, 1)
	udata = append(udata, udataSetDataTypeof, byte(len(typeOf)+2))
	udata = append(append(udata, typeOf...), 1, 0)
	udata = udataU32(udata, udataSetDataInterval, 0)
	return b.anonMap(typeVerdict, 0, udata, len(chains), func(ae *netlink.AttributeEncoder) {
		for i, c := range chains {
			ae.Nested(uint16(i+1), func(ae *netlink.AttributeEncoder) error {
				encodeElem(ae, binary.NativeEndian.AppendUint32(nil, uint32(i)), &expr.Verdict{Kind: expr.VerdictGoto, Chain: c}, nil)
				return nil
			})
		}
	})
}
