package ebpf

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// FakeMaps is Maps in memory, for tests of the dataplane without a kernel.
// After every operation it checks what a socket would see at that moment:
// that every frontend with endpoints finds all its slots (unless it
// lacked some before the operation: a test's damage by hand, which only a
// repair makes whole). Broken (nil unless some operation broke a
// frontend) says when it did not.
type FakeMaps struct {
	Services map[Frontend]ServiceValue
	Slots    map[[2]uint32]netip.AddrPort // (set, slot)
	Members  map[uint32]map[netip.AddrPort]uint32
	Ranges   map[Frontend][]netip.Prefix
	// Ops logs each operation, e.g. "put-set 3 [10.0.0.1:80]".
	Ops []string
	// Err, if set, is returned by the next operation (then cleared).
	Err error
	// Broken is the first moment a frontend lacked a slot, if any.
	Broken error

	// damaged are the frontends that lacked something before the current
	// operation.
	damaged map[Frontend]bool
}

// NewFakeMaps returns empty maps.
func NewFakeMaps() *FakeMaps {
	return &FakeMaps{Services: map[Frontend]ServiceValue{}, Slots: map[[2]uint32]netip.AddrPort{}, Members: map[uint32]map[netip.AddrPort]uint32{}, Ranges: map[Frontend][]netip.Prefix{}}
}

// fail starts an operation: it notes the frontends damaged before it, and
// returns Err, cleared.
func (f *FakeMaps) fail() error {
	clear(f.damaged)
	for fe := range f.Services {
		if f.whyBroken(fe) != "" {
			if f.damaged == nil {
				f.damaged = map[Frontend]bool{}
			}
			f.damaged[fe] = true
		}
	}
	err := f.Err
	f.Err = nil
	return err
}

// check verifies that every frontend finds its endpoints, after op.
func (f *FakeMaps) check(op string) {
	if f.Broken != nil {
		return
	}
	for fe := range f.Services {
		if why := f.whyBroken(fe); why != "" && !f.damaged[fe] {
			f.Broken = fmt.Errorf("after %q: frontend %s %s", op, fe, why)
			return
		}
	}
}

// whyBroken says what frontend fe lacks, if anything.
func (f *FakeMaps) whyBroken(fe Frontend) string {
	v := f.Services[fe]
	// A frontend that filters on source ranges has some, or it would
	// drop every client.
	if v.SourceRanges && len(f.Ranges[fe]) == 0 {
		return "filters on source ranges but has none"
	}
	for i := range v.Count {
		if _, ok := f.Slots[[2]uint32{v.Set, i}]; !ok {
			return fmt.Sprintf("has count %d but set %d lacks slot %d", v.Count, v.Set, i)
		}
	}
	return ""
}

func (f *FakeMaps) log(op string) {
	f.Ops = append(f.Ops, op)
	f.check(op)
}

// PutSet implements Maps.
func (f *FakeMaps) PutSet(id uint32, eps []netip.AddrPort, members bool) error {
	if err := f.fail(); err != nil {
		return err
	}
	for i, ep := range eps {
		f.Slots[[2]uint32{id, uint32(i)}] = ep
	}
	if members {
		f.Members[id] = map[netip.AddrPort]uint32{}
		for i, ep := range eps {
			f.Members[id][ep] = uint32(i)
		}
	}
	f.log(fmt.Sprintf("put-set %d %v", id, eps))
	return nil
}

// DeleteSet implements Maps.
func (f *FakeMaps) DeleteSet(id uint32, eps []netip.AddrPort, members bool) error {
	if err := f.fail(); err != nil {
		return err
	}
	for i := range eps {
		delete(f.Slots, [2]uint32{id, uint32(i)})
	}
	if members {
		delete(f.Members, id)
	}
	f.log(fmt.Sprintf("delete-set %d", id))
	return nil
}

// PutService implements Maps.
func (f *FakeMaps) PutService(fe Frontend, v ServiceValue) error {
	if err := f.fail(); err != nil {
		return err
	}
	f.Services[fe] = v
	f.log(fmt.Sprintf("put-service %s set=%d count=%d", fe, v.Set, v.Count))
	return nil
}

// DeleteService implements Maps.
func (f *FakeMaps) DeleteService(fe Frontend) error {
	if err := f.fail(); err != nil {
		return err
	}
	delete(f.Services, fe)
	f.log(fmt.Sprintf("delete-service %s", fe))
	return nil
}

// Dump implements Maps.
func (f *FakeMaps) Dump() (map[Frontend]ServiceValue, map[uint32]KernelSet, error) {
	if err := f.fail(); err != nil {
		return nil, nil, err
	}
	sets := map[uint32]KernelSet{}
	for _, k := range slices.SortedFunc(maps.Keys(f.Slots), func(a, b [2]uint32) int {
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		return int(a[1]) - int(b[1])
	}) {
		s := sets[k[0]]
		for uint32(len(s.Endpoints)) <= k[1] {
			s.Endpoints = append(s.Endpoints, netip.AddrPort{})
		}
		s.Endpoints[k[1]] = f.Slots[k]
		s.Members = f.Members[k[0]] != nil
		sets[k[0]] = s
	}
	return maps.Clone(f.Services), sets, nil
}

// DumpServices implements Maps.
func (f *FakeMaps) DumpServices() (map[Frontend]ServiceValue, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return maps.Clone(f.Services), nil
}

// DumpSlots implements Maps.
func (f *FakeMaps) DumpSlots(slot func(set, slot uint32, ep netip.AddrPort), member func(set uint32, ep netip.AddrPort, slot uint32)) error {
	if err := f.fail(); err != nil {
		return err
	}
	for k, ep := range f.Slots {
		slot(k[0], k[1], ep)
	}
	for set, ms := range f.Members {
		for ep, s := range ms {
			member(set, ep, s)
		}
	}
	return nil
}

// PutRanges implements Maps.
func (f *FakeMaps) PutRanges(fe Frontend, ps []netip.Prefix) error {
	if err := f.fail(); err != nil {
		return err
	}
	f.Ranges[fe] = mergePrefixes(f.Ranges[fe], ps)
	f.log(fmt.Sprintf("put-ranges %s %v", fe, ps))
	return nil
}

// DeleteRanges implements Maps.
func (f *FakeMaps) DeleteRanges(fe Frontend, ps []netip.Prefix) error {
	if err := f.fail(); err != nil {
		return err
	}
	f.Ranges[fe] = slices.DeleteFunc(slices.Clone(f.Ranges[fe]), func(p netip.Prefix) bool { return slices.Contains(ps, p) })
	if len(f.Ranges[fe]) == 0 {
		delete(f.Ranges, fe)
	}
	f.log(fmt.Sprintf("delete-ranges %s %v", fe, ps))
	return nil
}

// DumpRanges implements Maps.
func (f *FakeMaps) DumpRanges() (map[Frontend][]netip.Prefix, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	out := map[Frontend][]netip.Prefix{}
	for fe, ps := range f.Ranges {
		out[fe] = slices.Clone(ps)
	}
	return out, nil
}

// Resolve returns the endpoints a socket dialling fe may reach now, as the
// programs would find them, and whether the frontend exists.
func (f *FakeMaps) Resolve(fe Frontend) ([]netip.AddrPort, bool) {
	v, ok := f.Services[fe]
	if !ok {
		return nil, false
	}
	var out []netip.AddrPort
	for i := range v.Count {
		out = append(out, f.Slots[[2]uint32{v.Set, i}])
	}
	return out, true
}
