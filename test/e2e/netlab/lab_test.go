//go:build e2e

package netlab

import (
	"net/netip"
	"testing"
)

func TestSmoke(t *testing.T) {
	l := New(t, DefaultSpec())
	a, c := l.Pod("pod-a"), l.Pod("pod-c")
	for _, fam := range []int{4, 6} {
		r := a.TCP(netip.AddrPortFrom(c.Addr(fam), 8080))
		t.Logf("%v", r)
		r = a.UDP(netip.AddrPortFrom(c.Addr(fam), 8080))
		t.Logf("%v", r)
	}
}
