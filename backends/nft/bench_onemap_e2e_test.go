//go:build e2e

package nft

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/kpng/kpng/internal/netnstest"
)

// BenchmarkKernelOneMap measures the design kpng does not use, to say why:
// no chain and no map per service, but every service's endpoints in one
// map keyed by the service's address, port and a random number's range,
//
//	dnat to ip daddr . tcp dport . numgen random mod 840 map @m
//
// (a concatenated key with intervals: the kernel's pipapo set). It has
// neither the set search nor the chain walk that a one-endpoint change
// pays in kpng's tables (BenchmarkKernelShape). The loop is that change:
// one element deleted and added back with another endpoint, one
// transaction. N services of 10 endpoints each, every endpoint a range of
// 84 of the 840 values. Its cost grows with every endpoint of the node
// (docs/performance.md), so the sizes stop where the point is made.
func BenchmarkKernelOneMap(b *testing.B) {
	for _, n := range []int{100, 1000, 3000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchmarkOneMap(b, n) })
	}
}

func benchmarkOneMap(b *testing.B, services int) {
	var failure string
	inNetns(b, func(ns *netnstest.Netns) {
		if err := loadOneMap(ns, services); err != nil {
			failure = err.Error()
			return
		}
		c, err := lastingConn()
		if err != nil {
			failure = err.Error()
			return
		}
		defer c.CloseLasting()
		s, err := c.GetSetByName(&nftables.Table{Name: "t", Family: nftables.TableFamilyIPv4}, "m")
		if err != nil {
			failure = fmt.Sprintf("map m: %v", err)
			return
		}
		// The element to change, as the kernel holds it (its key and
		// key end as nft encoded them).
		els, err := c.GetSetElements(s)
		if err != nil || len(els) == 0 {
			failure = fmt.Sprintf("listing map m: %d elements, %v", len(els), err)
			return
		}
		e := els[0]
		if want := services * 10; len(els) < want {
			failure = fmt.Sprintf("map m lists %d elements, want %d", len(els), want)
			return
		}
		cpu0 := threadCPU()
		for b.Loop() {
			next := e
			next.Val = append([]byte(nil), e.Val...)
			next.Val[3] ^= 1 // another endpoint address
			if err := c.SetDeleteElements(s, []nftables.SetElement{e}); err != nil {
				failure = err.Error()
				return
			}
			if err := c.SetAddElements(s, []nftables.SetElement{next}); err != nil {
				failure = err.Error()
				return
			}
			if err := c.Flush(); err != nil {
				failure = fmt.Sprintf("replacing an endpoint: %v", err)
				return
			}
			e = next
		}
		// The thread's CPU, the kernel's included.
		b.ReportMetric(float64((threadCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/change")
	})
	if failure != "" {
		b.Fatalf("benchmark failed: %s", failure)
	}
}

// loadOneMap creates table t with the one map and its rule, and the
// services' endpoints, one service's per command, in transactions of
// 20,000 elements (commands of 5,000 elements made nft fail with ENOBUFS).
func loadOneMap(ns *netnstest.Netns, services int) error {
	const head = `table ip t {
	map m {
		typeof ip daddr . tcp dport . numgen random mod 840 : ip daddr . tcp dport
		flags interval
	}
	chain c {
		type nat hook prerouting priority dstnat;
		dnat to ip daddr . tcp dport . numgen random mod 840 map @m
	}
}
`
	if out, err := ns.RunInput(head, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("creating the map: %v: %s", err, out)
	}
	var in strings.Builder
	elems := 0
	flush := func() error {
		if in.Len() == 0 {
			return nil
		}
		out, err := ns.RunInput(in.String(), "nft", "-f", "-")
		in.Reset()
		if err != nil {
			return fmt.Errorf("loading endpoints: %v: %s", err, out)
		}
		return nil
	}
	for s := range services {
		in.WriteString("add element ip t m {")
		for e := range 10 {
			ep := s*10 + e
			if e > 0 {
				in.WriteByte(',')
			}
			fmt.Fprintf(&in, " 10.%d.%d.%d . 80 . %d-%d : 172.%d.%d.%d . 8080",
				s>>16&255, s>>8&255, s&255, e*84, e*84+83, 16+ep>>16&15, ep>>8&255, ep&255)
		}
		in.WriteString(" }\n")
		if elems += 10; elems%20000 == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
