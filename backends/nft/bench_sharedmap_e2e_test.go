//go:build e2e

package nft

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/kpng/kpng/internal/netnstest"
)

// BenchmarkKernelSharedMap measures a design kpng does not use yet: the
// endpoint maps of every service in one map. Today each service port has
// an interval map of its own (endpointSlots), and each element operation
// of a one-endpoint change finds that map by name in the list of every
// set of the table: two thirds of the kernel's share of the change at
// 30,000 services (docs/performance.md, "One endpoint change"). Here
// service i's rule is
//
//	dnat ip to numgen random mod 65536 offset i*65536 map @ep
//
// and its ten intervals lie at that offset in the one map ep, a
// single-field interval map (the kernel's rbtree, not BenchmarkKernelOneMap's
// pipapo): "shared-interval". "shared-exact" has no intervals: service i
// looks up `numgen random mod 10 offset i*16` in a map of exact keys (a
// hash), so its rule would change with its number of endpoints.
// "per-service" is today's layout, with the same chains and rules: N maps
// ep-i. "sharded" is today's layout spread over shardTables tables, service
// i's chain and map in table t(i mod shardTables): each table's list of
// sets is that much shorter (the chain walk is the namespace's, so it
// stays; a node would need base chains in each table to reach them).
// The loop replaces the endpoint of one slot of one service (a different
// service each time), one transaction: the change a one-endpoint sync
// sends. "cold" evicts the CPU's caches before each
// change (not timed).
//
//	go test -tags e2e -run XXX -bench 'KernelSharedMap' -benchtime 2000x ./backends/nft/
func BenchmarkKernelSharedMap(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		for _, l := range []mapLayout{perService, sharded, sharedInterval, sharedExact} {
			if l == sharedInterval && n > 1000 {
				// nft reads the whole interval map back to add to it:
				// loading 100,000 intervals takes minutes, and at 1,000
				// the layout already costs several times today's.
				continue
			}
			for _, cold := range []bool{false, true} {
				name := fmt.Sprintf("%s-%d", l, n)
				if cold {
					name += "-cold"
				}
				b.Run(name, func(b *testing.B) { benchmarkSharedMap(b, n, l, cold) })
			}
		}
	}
}

// mapLayout is where the services' endpoints are (BenchmarkKernelSharedMap).
type mapLayout string

const (
	perService     mapLayout = "per-service"
	sharded        mapLayout = "sharded"
	sharedInterval mapLayout = "shared-interval"
	sharedExact    mapLayout = "shared-exact"
)

// shardTables is the number of tables of the sharded layout.
const shardTables = 16

// tableOf is the table of service svc in layout l.
func (l mapLayout) tableOf(svc int) string {
	if l == sharded {
		return fmt.Sprintf("t%d", svc%shardTables)
	}
	return "t"
}

// exactStride is the distance between two services' keys in the
// shared-exact map: room for their 10 endpoints.
const exactStride = 16

// sharedMapEndpoints is the number of endpoints of each service; endpoint
// e of a service holds slots [e*65536/10, (e+1)*65536/10) of its range.
const sharedMapEndpoints = 10

func benchmarkSharedMap(b *testing.B, services int, layout mapLayout, cold bool) {
	shared := layout == sharedInterval || layout == sharedExact
	var failure string
	inNetns(b, func(ns *netnstest.Netns) {
		if err := loadSharedMap(ns, services, layout); err != nil {
			failure = err.Error()
			return
		}
		c, err := lastingConn()
		if err != nil {
			failure = err.Error()
			return
		}
		defer c.CloseLasting()
		tables := []string{"t"}
		if layout == sharded {
			tables = tables[:0]
			for i := range shardTables {
				tables = append(tables, layout.tableOf(i))
			}
		}
		byName := map[string]*nftables.Set{} // by table/name
		for _, t := range tables {
			sets, err := c.GetSets(&nftables.Table{Name: t, Family: nftables.TableFamilyIPv4})
			if err != nil {
				failure = fmt.Sprintf("listing the sets of %s: %v", t, err)
				return
			}
			for _, s := range sets {
				byName[t+"/"+s.Name] = s
			}
		}
		if len(byName) != map[bool]int{false: services, true: 1}[shared] {
			failure = fmt.Sprintf("%d sets loaded", len(byName))
			return
		}
		var evict func()
		if cold {
			evict = evictCaches()
		}
		hi := uint32(endpointSlots/sharedMapEndpoints - 1) // the first endpoint's last slot
		key := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
		// The value an interval holds: an IPv4 address and a port, padded
		// to the register's 4 bytes as nft writes it.
		value := func(svc int) []byte {
			return []byte{172, byte(16 + svc>>16&15), byte(svc >> 8), byte(svc), 0x1f, 0x90, 0, 0}
		}
		gens := make([]int, services)
		i := 0
		var wall, cpu time.Duration
		for b.Loop() {
			svc := i * 7919 % services // a different service each time
			set, base := byName["t/ep"], uint32(svc)*endpointSlots
			switch layout {
			case perService, sharded:
				set, base = byName[fmt.Sprintf("%s/ep-%d", layout.tableOf(svc), svc)], 0
			case sharedExact:
				base = uint32(svc) * exactStride
			}
			old, next := value(svc), value(svc)
			old[3] ^= byte(gens[svc] & 1)
			next[3] ^= byte((gens[svc] + 1) & 1)
			del, add := []nftables.SetElement{{Key: key(base), Val: old}}, []nftables.SetElement{{Key: key(base), Val: next}}
			if layout == sharedExact {
				// An exact key is numgen's, in the host's byte order; an
				// interval's is converted to the network's by the rule.
				k := binary.NativeEndian.AppendUint32(nil, base)
				del[0].Key, add[0].Key = k, k
			} else {
				end := nftables.SetElement{Key: key(base + hi + 1), IntervalEnd: true}
				del, add = append(del, end), append(add, end)
			}
			if err := c.SetDeleteElements(set, del); err != nil {
				failure = err.Error()
				return
			}
			if err := c.SetAddElements(set, add); err != nil {
				failure = err.Error()
				return
			}
			if evict != nil {
				b.StopTimer()
				evict()
				b.StartTimer()
			}
			t0, c0 := time.Now(), threadCPU()
			if err := c.Flush(); err != nil {
				failure = fmt.Sprintf("replacing an endpoint of service %d: %v", svc, err)
				return
			}
			wall, cpu = wall+time.Since(t0), cpu+threadCPU()-c0
			gens[svc]++
			i++
		}
		b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "µs/change")
		// The thread's CPU in the transaction, the kernel's included: the
		// commit runs in the sending thread.
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/change")
	})
	if failure != "" {
		b.Fatalf("benchmark failed: %s", failure)
	}
}

// loadSharedMap creates table t with a chain per service whose rule looks
// its endpoints up, and the endpoints: in one map ep at the service's
// offset, or in a map ep-i of each service's own (layout), in
// transactions of 50,000 elements.
func loadSharedMap(ns *netnstest.Netns, services int, layout mapLayout) error {
	mapHead := "{ typeof numgen random mod 65536 : ip daddr . tcp dport; flags interval; }"
	if layout == sharedExact {
		mapHead = "{ typeof numgen random mod 65536 : ip daddr . tcp dport; }"
	}
	shared := layout == sharedInterval || layout == sharedExact
	var in strings.Builder
	in.WriteString("add table ip t\n")
	for i := range shardTables {
		if layout == sharded {
			fmt.Fprintf(&in, "add table ip %s\n", layout.tableOf(i))
		}
	}
	if shared {
		in.WriteString("add map ip t ep " + mapHead + "\n")
	}
	elems := 0
	flush := func() error {
		if in.Len() == 0 {
			return nil
		}
		// nft reads back what the namespace holds before each command,
		// and the kernel checks each new set's name against the table's:
		// a command of 50,000 elements at 30,000 services takes minutes.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := ns.Command(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(in.String())
		out, err := cmd.CombinedOutput()
		in.Reset()
		if err != nil {
			return fmt.Errorf("loading the table: %v: %s", err, out)
		}
		return nil
	}
	for s := range services {
		m, base := "ep", s*endpointSlots
		if !shared {
			m, base = fmt.Sprintf("ep-%d", s), 0
			fmt.Fprintf(&in, "add map ip %s %s %s\n", layout.tableOf(s), m, mapHead)
		}
		t := layout.tableOf(s)
		fmt.Fprintf(&in, "add chain ip %s c-%d\n", t, s)
		mod, offset := endpointSlots, ""
		switch layout {
		case sharedInterval:
			offset = fmt.Sprintf(" offset %d", base)
		case sharedExact:
			base = s * exactStride
			mod, offset = sharedMapEndpoints, fmt.Sprintf(" offset %d", base)
		}
		fmt.Fprintf(&in, "add rule ip %s c-%d meta l4proto tcp dnat ip to numgen random mod %d%s map @%s\n", t, s, mod, offset, m)
		fmt.Fprintf(&in, "add element ip %s %s {", t, m)
		for e := range sharedMapEndpoints {
			if e > 0 {
				in.WriteByte(',')
			}
			slot := fmt.Sprint(base + e)
			if layout != sharedExact {
				slot = fmt.Sprintf("%d-%d", base+endpointSlots*e/sharedMapEndpoints, base+endpointSlots*(e+1)/sharedMapEndpoints-1)
			}
			fmt.Fprintf(&in, " %s : 172.%d.%d.%d . 8080", slot, 16+s>>16&15, s>>8&255, s&255)
		}
		in.WriteString(" }\n")
		if elems += sharedMapEndpoints; elems%50000 == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
