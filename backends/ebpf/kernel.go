package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// kernelMaps is Maps on the BPF maps the socket programs read.
type kernelMaps struct {
	services *ebpf.Map
	slots    *ebpf.Map
	members  *ebpf.Map
	ranges   *ebpf.Map // kpng_source_ranges, of the node-port programs
}

func newKernelMaps(m *sockMaps) *kernelMaps {
	return &kernelMaps{services: m.KpngServices, slots: m.KpngSlots, members: m.KpngMembers}
}

// The maps hold addresses and ports in network order, as the socket's
// struct bpf_sock_addr does; IPv4 as IPv4-mapped IPv6.

func addrKey(a netip.Addr) [4]uint32 {
	b := a.As16()
	var k [4]uint32
	for i := range k {
		k[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return k
}

func keyAddr(k [4]uint32) netip.Addr {
	var b [16]byte
	for i, w := range k {
		binary.NativeEndian.PutUint32(b[4*i:], w)
	}
	return netip.AddrFrom16(b).Unmap()
}

// portKey converts a port to and from network order (its own inverse).
func portKey(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

func endpointKey(ap netip.AddrPort) sockEndpoint {
	return sockEndpoint{Addr: addrKey(ap.Addr()), Port: portKey(ap.Port())}
}

func keyEndpoint(e sockEndpoint) netip.AddrPort {
	return netip.AddrPortFrom(keyAddr(e.Addr), portKey(e.Port))
}

// svc_key.scope in bpf/maps.h.
const (
	scopeNode    = 0
	scopeOutside = 1
)

func frontendKey(f Frontend) sockSvcKey {
	k := sockSvcKey{Addr: addrKey(f.Addr), Port: portKey(f.Port), Proto: f.Proto, Scope: scopeNode}
	if f.Outside {
		k.Scope = scopeOutside
	}
	return k
}

func keyFrontend(k sockSvcKey) Frontend {
	return Frontend{Addr: keyAddr(k.Addr), Port: portKey(k.Port), Proto: k.Proto, Outside: k.Scope == scopeOutside}
}

// svc_val.flags in bpf/maps.h.
const (
	svcFlagDrop = 1 // SVC_F_DROP
	svcFlagMasq = 2 // SVC_F_MASQ
	svcFlagNode = 4 // SVC_F_NODEPORT
	svcFlagSrc  = 8 // SVC_F_RANGES
)

func serviceValue(v ServiceValue) sockSvcVal {
	out := sockSvcVal{Set: v.Set, Count: v.Count, AffinitySec: v.AffinitySec, AffinityId: v.AffinityID}
	if v.Drop {
		out.Flags |= svcFlagDrop
	}
	if v.Masquerade {
		out.Flags |= svcFlagMasq
	}
	if v.NodePort {
		out.Flags |= svcFlagNode
	}
	if v.SourceRanges {
		out.Flags |= svcFlagSrc
	}
	return out
}

func valueService(v sockSvcVal) ServiceValue {
	return ServiceValue{Set: v.Set, Count: v.Count, AffinitySec: v.AffinitySec, AffinityID: v.AffinityId, Drop: v.Flags&svcFlagDrop != 0, Masquerade: v.Flags&svcFlagMasq != 0, NodePort: v.Flags&svcFlagNode != 0, SourceRanges: v.Flags&svcFlagSrc != 0}
}

// PutSet implements Maps, with one batch update per map.
func (k *kernelMaps) PutSet(id uint32, eps []netip.AddrPort, members bool) error {
	keys := make([]sockSlotKey, len(eps))
	vals := make([]sockEndpoint, len(eps))
	for i, ep := range eps {
		keys[i], vals[i] = sockSlotKey{Set: id, Slot: uint32(i)}, endpointKey(ep)
	}
	if _, err := k.slots.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("slots: %w", err)
	}
	if !members {
		return nil
	}
	mkeys := make([]sockMemberKey, len(eps))
	slots := make([]uint32, len(eps))
	for i, ep := range eps {
		mkeys[i], slots[i] = sockMemberKey{Set: id, Ep: endpointKey(ep)}, uint32(i)
	}
	if _, err := k.members.BatchUpdate(mkeys, slots, nil); err != nil {
		return fmt.Errorf("members: %w", err)
	}
	return nil
}

// DeleteSet implements Maps.
func (k *kernelMaps) DeleteSet(id uint32, eps []netip.AddrPort, members bool) error {
	keys := make([]sockSlotKey, len(eps))
	for i := range eps {
		keys[i] = sockSlotKey{Set: id, Slot: uint32(i)}
	}
	if err := batchDelete(k.slots, keys); err != nil {
		return fmt.Errorf("slots: %w", err)
	}
	if !members {
		return nil
	}
	var mkeys []sockMemberKey
	for _, ep := range eps {
		if ep.IsValid() {
			mkeys = append(mkeys, sockMemberKey{Set: id, Ep: endpointKey(ep)})
		}
	}
	if err := batchDelete(k.members, mkeys); err != nil {
		return fmt.Errorf("members: %w", err)
	}
	return nil
}

// batchDelete deletes keys, in one call unless some are already gone (the
// kernel's batch stops at the first missing key): then one by one.
func batchDelete[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	n, err := m.BatchDelete(keys, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	for _, key := range keys[n:] {
		if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// PutService implements Maps.
func (k *kernelMaps) PutService(f Frontend, v ServiceValue) error {
	key, val := frontendKey(f), serviceValue(v)
	return k.services.Put(&key, &val)
}

// DeleteService implements Maps.
func (k *kernelMaps) DeleteService(f Frontend) error {
	key := frontendKey(f)
	if err := k.services.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// DumpServices implements Maps.
func (k *kernelMaps) DumpServices() (map[Frontend]ServiceValue, error) {
	svcs := map[Frontend]ServiceValue{}
	err := batchDump(k.services, func(key sockSvcKey, v sockSvcVal) {
		svcs[keyFrontend(key)] = valueService(v)
	})
	if err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	return svcs, nil
}

// Dump implements Maps.
func (k *kernelMaps) Dump() (map[Frontend]ServiceValue, map[uint32]KernelSet, error) {
	svcs, err := k.DumpServices()
	if err != nil {
		return nil, nil, err
	}
	sets := map[uint32]KernelSet{}
	err = k.DumpSlots(func(set, slot uint32, ep netip.AddrPort) {
		s := sets[set]
		for uint32(len(s.Endpoints)) <= slot {
			s.Endpoints = append(s.Endpoints, netip.AddrPort{})
		}
		s.Endpoints[slot] = ep
		sets[set] = s
	}, func(set uint32, ep netip.AddrPort, _ uint32) {
		s := sets[set]
		s.Members = true
		// A member whose slot is gone is still deleted with its set.
		if !slices.Contains(s.Endpoints, ep) {
			s.Endpoints = append(s.Endpoints, ep)
		}
		sets[set] = s
	})
	if err != nil {
		return nil, nil, err
	}
	return svcs, sets, nil
}

// DumpSlots implements Maps, with batch lookups.
func (k *kernelMaps) DumpSlots(slot func(set, slot uint32, ep netip.AddrPort), member func(set uint32, ep netip.AddrPort, slot uint32)) error {
	err := batchDump(k.slots, func(key sockSlotKey, ep sockEndpoint) {
		slot(key.Set, key.Slot, keyEndpoint(ep))
	})
	if err != nil {
		return fmt.Errorf("slots: %w", err)
	}
	err = batchDump(k.members, func(key sockMemberKey, s uint32) {
		member(key.Set, keyEndpoint(key.Ep), s)
	})
	if err != nil {
		return fmt.Errorf("members: %w", err)
	}
	return nil
}

// rangeKey is the key of a client prefix of frontend f: the frontend's 160
// bits, then the prefix (IPv4 as IPv4-mapped: 96 more bits).
func rangeKey(f Frontend, p netip.Prefix) nodeportRangeKey {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return nodeportRangeKey{Prefixlen: uint32(160 + bits), Svc: nodeportSvcKey(frontendKey(f)), Addr: addrKey(p.Masked().Addr())}
}

func keyRange(k nodeportRangeKey) (Frontend, netip.Prefix) {
	a := keyAddr(k.Addr)
	bits := int(k.Prefixlen) - 160
	if a.Is4() {
		bits -= 96
	}
	return keyFrontend(sockSvcKey(k.Svc)), netip.PrefixFrom(a, bits)
}

// PutRanges implements Maps.
func (k *kernelMaps) PutRanges(f Frontend, ps []netip.Prefix) error {
	one := uint8(1)
	for _, p := range ps {
		key := rangeKey(f, p)
		if err := k.ranges.Put(&key, &one); err != nil {
			return fmt.Errorf("source range %s: %w", p, err)
		}
	}
	return nil
}

// DeleteRanges implements Maps.
func (k *kernelMaps) DeleteRanges(f Frontend, ps []netip.Prefix) error {
	for _, p := range ps {
		key := rangeKey(f, p)
		if err := k.ranges.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("source range %s: %w", p, err)
		}
	}
	return nil
}

// DumpRanges implements Maps.
func (k *kernelMaps) DumpRanges() (map[Frontend][]netip.Prefix, error) {
	out := map[Frontend][]netip.Prefix{}
	var key nodeportRangeKey
	var v uint8
	it := k.ranges.Iterate()
	for it.Next(&key, &v) {
		f, p := keyRange(key)
		out[f] = append(out[f], p)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("source ranges: %w", err)
	}
	for f := range out {
		slices.SortFunc(out[f], comparePrefix)
	}
	return out, nil
}

// batchDump reads every entry of a hash map, thousands per system call.
func batchDump[K, V any](m *ebpf.Map, each func(K, V)) error {
	// A batch must hold a whole hash bucket; 4096 entries always do here.
	keys, vals := make([]K, 4096), make([]V, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			each(keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
