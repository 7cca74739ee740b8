package nft

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The endpoint maps (see endpointSlots) on the netlink path: the map, its
// interval elements, and the rule that looks it up, as nft 1.0.6 writes
// them.

// endpointMapUdata is the user data nft gives an endpoint map of protocol
// proto: the key's byte order (host), the value's (none), the "typeof"
// expressions nft reads back to list the declaration, and the value's
// interval flag. It is nft's own binary encoding of the declaration,
// captured from `nft --debug=mnl` for TCP; UDP and SCTP differ from it in
// one byte, the port's protocol. (TestNetlinkMatchesNft checks them all:
// the listing of a map written here must equal that of one nft wrote.)
func endpointMapUdata(f family, proto string) []byte {
	b := slices.Clone(endpointMapUdataTCP[f.model == ipv6.model])
	b[endpointMapUdataProto] = map[string]byte{"tcp": 8, "udp": 6, "sctp": 10}[proto]
	return b
}

var endpointMapUdataTCP = map[bool][]byte{
	false: mustHex("000401000000010400000000031a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c000408000000010402000000060400000000"),
	true:  mustHex("000401000000010400000000031a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040d0000000104090000000114000407000000010c000408000000010402000000060400000000"),
}

// endpointMapUdataProto is where the port's protocol is in that user data.
const endpointMapUdataProto = 84

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// endpointMap creates an endpoint map.
func (b *batch) endpointMap(m *knftables.Map) error {
	f := b.fam
	proto := ""
	for _, p := range serviceProtocols {
		if m.TypeOf == f.endpointMapTypeOf(p) {
			proto = p
		}
	}
	if proto == "" || m.Type != "" || len(m.Flags) != 1 || m.Flags[0] != knftables.IntervalFlag ||
		m.Comment != nil || m.Timeout != nil || m.Size != nil || m.Policy != nil || m.GCInterval != nil || !validName(m.Name) {
		return cannot("map %s of this shape", m.Name)
	}
	dataType := uint32(typeIPv4Addr<<6 | typeInetService)
	if f.model == ipv6.model {
		dataType = typeIPv6Addr<<6 | typeInetService
	}
	id := b.newID(m.Name)
	b.msg(unix.NFT_MSG_NEWSET, netlink.Create, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_TABLE, b.table)
		ae.String(unix.NFTA_SET_NAME, m.Name)
		ae.Uint32(unix.NFTA_SET_FLAGS, unix.NFT_SET_INTERVAL|unix.NFT_SET_MAP)
		ae.Uint32(unix.NFTA_SET_KEY_TYPE, typeInteger)
		ae.Uint32(unix.NFTA_SET_KEY_LEN, 4)
		ae.Uint32(unix.NFTA_SET_DATA_TYPE, dataType)
		ae.Uint32(unix.NFTA_SET_DATA_LEN, uint32(f.addrLen()+4))
		ae.Uint32(unix.NFTA_SET_ID, id)
		ae.Bytes(unix.NFTA_SET_USERDATA, endpointMapUdata(f, proto))
	})
	return nil
}

// endpointElem checks one interval of endpoint map def and returns what
// writes it, as nft does: the interval's start (with the value, when
// adding) and its end, the first slot after it, flagged as an end.
func (b *batch) endpointElem(v verb, name string, def *set, e *knftables.Element) (func(*netlink.AttributeEncoder), error) {
	if listedTypes[def.typeOf] != b.fam.endpointMapType() || len(e.Key) != 1 || e.Comment != nil {
		return nil, cannot("element %v of %s", e.Key, name)
	}
	lo, hi, err := parseSlots(e.Key[0])
	if err != nil {
		return nil, cannot("element key %q of %s: %v", e.Key[0], name, err)
	}
	var data []byte
	if v == opAdd {
		if len(e.Value) != 1 {
			return nil, cannot("element value %v of %s", e.Value, name)
		}
		addr, port, ok := strings.Cut(e.Value[0], " . ")
		a, aerr := netip.ParseAddr(addr)
		p, perr := strconv.ParseUint(port, 10, 16)
		if !ok || aerr != nil || perr != nil || !b.fam.has(a) || a.Is4In6() || a.Zone() != "" {
			return nil, cannot("element value %q of %s", e.Value[0], name)
		}
		data = binary.BigEndian.AppendUint16(a.AsSlice(), uint16(p))
		data = append(data, 0, 0)
	}
	return func(ae *netlink.AttributeEncoder) {
		ae.Nested(unix.NFTA_LIST_ELEM, func(ae *netlink.AttributeEncoder) error {
			encodeElem(ae, binary.BigEndian.AppendUint32(nil, lo), nil, data)
			return nil
		})
		ae.Nested(unix.NFTA_LIST_ELEM, func(ae *netlink.AttributeEncoder) error {
			ae.Uint32(unix.NFTA_SET_ELEM_FLAGS, unix.NFT_SET_ELEM_INTERVAL_END)
			encodeElem(ae, binary.BigEndian.AppendUint32(nil, hi+1), nil, nil)
			return nil
		})
	}, nil
}

// parseSlots parses an endpoint map key, "LO-HI" or "N", within 0-65535.
func parseSlots(s string) (lo, hi uint32, err error) {
	l, h, isRange := strings.Cut(s, "-")
	lo64, err := strconv.ParseUint(l, 10, 32)
	if err != nil {
		return 0, 0, err
	}
	hi64 := lo64
	if isRange {
		if hi64, err = strconv.ParseUint(h, 10, 32); err != nil {
			return 0, 0, err
		}
	}
	if hi64 < lo64 || hi64 >= endpointSlots {
		return 0, 0, strconv.ErrRange
	}
	return uint32(lo64), uint32(hi64), nil
}
