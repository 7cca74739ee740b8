package nft

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/backend"
)

func TestMergeElements(t *testing.T) {
	in := `add table ip kpng
add element ip kpng m { 0-32767 : 10.0.0.1 . 80 }
add element ip kpng m { 32768-65535 : 10.0.0.2 . 80 }
add element ip kpng service-ips { 10.96.0.5 . tcp . 80 : goto service-X }
delete element ip kpng m { 0-65535 }
delete element ip kpng m { 1-2 }
add rule ip kpng c meta l4proto tcp dnat ip to numgen random mod 65536 map @m
add element ip kpng m { 0-65535 : 10.0.0.3 . 80 }
`
	want := `add table ip kpng
add element ip kpng m { 0-32767 : 10.0.0.1 . 80, 32768-65535 : 10.0.0.2 . 80 }
add element ip kpng service-ips { 10.96.0.5 . tcp . 80 : goto service-X }
delete element ip kpng m { 0-65535, 1-2 }
add rule ip kpng c meta l4proto tcp dnat ip to numgen random mod 65536 map @m
add element ip kpng m { 0-65535 : 10.0.0.3 . 80 }
`
	if got := mergeElements(in); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	// A long run is cut into commands of at most maxElemsPerCommand.
	long := strings.Repeat("add element ip kpng s { 10.0.0.1 }\n", maxElemsPerCommand+1)
	if got := strings.Count(mergeElements(long), "add element"); got != 2 {
		t.Errorf("%d elements made %d commands, want 2", maxElemsPerCommand+1, got)
	}
}

// Additions that follow their set's or map's declaration go into it; any
// other line ends the declaration, which is written as it was.
func TestMergeElementsIntoDeclarations(t *testing.T) {
	in := `add table ip kpng { comment "rules for kpng" ; }
add map ip kpng m { typeof numgen random mod 65536 : ip daddr . tcp dport ; flags interval ; }
add element ip kpng m { 0-32767 : 10.0.0.1 . 80 }
add element ip kpng m { 32768-65535 : 10.0.0.2 . 80 }
add set ip kpng s { type ipv4_addr ; comment "a set { with braces }" ; }
add element ip kpng other { 10.0.0.9 }
add set ip kpng s2 { type ipv4_addr ; }
delete element ip kpng s2 { 10.0.0.1 }
add map ip kpng empty { type ipv4_addr : verdict ; }
add chain ip kpng c
add set ip kpng last { type ipv4_addr ; }
`
	want := `add table ip kpng { comment "rules for kpng" ; }
add map ip kpng m { typeof numgen random mod 65536 : ip daddr . tcp dport ; flags interval ; elements = { 0-32767 : 10.0.0.1 . 80, 32768-65535 : 10.0.0.2 . 80 } ; }
add set ip kpng s { type ipv4_addr ; comment "a set { with braces }" ; }
add element ip kpng other { 10.0.0.9 }
add set ip kpng s2 { type ipv4_addr ; }
delete element ip kpng s2 { 10.0.0.1 }
add map ip kpng empty { type ipv4_addr : verdict ; }
add chain ip kpng c
add set ip kpng last { type ipv4_addr ; }
`
	if got := mergeElements(in); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	// A long run fills the declaration, then commands of its own.
	long := "add set ip kpng s { type ipv4_addr ; }\n" + strings.Repeat("add element ip kpng s { 10.0.0.1 }\n", maxElemsPerCommand+1)
	got := mergeElements(long)
	if n := strings.Count(got, "elements = {"); n != 1 || strings.Count(got, "add element") != 1 || !strings.HasSuffix(got, " }\n") {
		t.Errorf("%d elements after their declaration: %d in it, then %d commands:\n%.300s", maxElemsPerCommand+1, n, strings.Count(got, "add element"), got)
	}
}

// In a cold transaction each endpoint map's elements follow the map, for
// the merger to declare them with it; elements that point at a chain come
// after the chains.
func TestNewSetsElementsFollowThem(t *testing.T) {
	st := benchState(20, 3)
	rec := &recorder{Interface: knftables.NewFake(knftables.IPv4Family, "kpng")}
	empty := func(context.Context) (*snapshot, error) { return newSnapshot(), nil }
	coldSync(t, NewBackend(testConfig(), newTable(ipv4, rec, empty)), st)
	ops := rec.ops[0]
	lastChain, maps := -1, 0
	for i, o := range ops {
		if _, ok := o.object().(*knftables.Chain); ok && o.elem == nil {
			lastChain = i
		}
	}
	for i, o := range ops {
		if o.elem == nil {
			continue
		}
		if strings.HasPrefix(o.elem.set, "ep-") {
			prev := ops[i-1]
			if m, ok := prev.object().(*knftables.Map); !(ok && prev.elem == nil && m.Name == o.elem.set) && !(prev.elem != nil && prev.elem.set == o.elem.set) {
				t.Fatalf("element of %s at %d does not follow its map", o.elem.set, i)
			}
			maps++
		} else if strings.Contains(o.elem.value, "goto ") && i < lastChain {
			t.Fatalf("verdict element %v at %d comes before the last chain (%d)", o.elem, i, lastChain)
		}
	}
	if maps != 60 {
		t.Errorf("%d endpoint map elements, want 60", maps)
	}
	text := mergeElements(transaction(rec, ops).String())
	if n := strings.Count(text, "elements = {"); n < 20 {
		t.Errorf("%d declarations with their elements, want at least the 20 endpoint maps:\n%.2000s", n, text)
	}
}

// recorder keeps the operations of the transactions it is given to run.
type recorder struct {
	knftables.Interface
	ops [][]op
}

func (r *recorder) runOps(_ context.Context, ops []op) error {
	r.ops = append(r.ops, ops)
	return nil
}

// TestOpsReaderWritesTheTransactionText: nft's input, rendered a chunk at a
// time, is exactly the merged text of the whole transaction, whatever the
// chunk size (element runs go on across chunks).
func TestOpsReaderWritesTheTransactionText(t *testing.T) {
	st := benchState(300, 10)
	rec := &recorder{Interface: knftables.NewFake(knftables.IPv4Family, "kpng")}
	empty := func(context.Context) (*snapshot, error) { return newSnapshot(), nil }
	be := NewBackend(testConfig(), newTable(ipv4, rec, empty))
	coldSync(t, be, st)
	se := benchService(7, 3, 1) // fewer endpoints, one of them new
	k := backend.KeyOf(se)
	st.Services[k] = se
	if err := be.Sync(context.Background(), st, backend.Changes{Set: []backend.ServiceKey{k}}); err != nil {
		t.Fatal(err)
	}
	if len(rec.ops) != 2 {
		t.Fatalf("%d transactions, want 2", len(rec.ops))
	}
	defer func(n int) { renderChunk = n }(renderChunk)
	for i, ops := range rec.ops {
		want := mergeElements(transaction(rec, ops).String())
		for _, renderChunk = range []int{1, 7, 512, len(ops)} {
			got, err := io.ReadAll(nftCommand{rec}.input(ops))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("transaction %d (%d operations), chunks of %d: the input differs from the transaction's text (%d and %d bytes)", i, len(ops), renderChunk, len(got), len(want))
			}
		}
	}
}

// TestOpsReaderStopsAtAnInvalidOperation: an operation knftables refuses
// fails the read, and abort is called before: nft must not see the end of
// an input that stops there (see nftCommand.exec).
func TestOpsReaderStopsAtAnInvalidOperation(t *testing.T) {
	ops := []op{{verb: opAdd, obj: &knftables.Table{}}}
	for i := range 2 * renderChunk {
		ops = append(ops, op{verb: opAdd, elem: &elem{elemID: elemID{"s", fmt.Sprintf("10.0.%d.%d", i/256, i%256)}}})
	}
	ops = append(ops, op{verb: opAdd, obj: &knftables.Element{Set: "s"}}) // no key
	aborted := false
	r := nftCommand{knftables.NewFake(knftables.IPv4Family, "kpng")}.input(ops)
	r.abort = func() { aborted = true }
	_, err := io.ReadAll(r)
	if err == nil || !strings.Contains(err.Error(), "no key") {
		t.Errorf("read error %v, want knftables' complaint of the element without a key", err)
	}
	if !aborted {
		t.Error("abort was not called")
	}
}
