package diffstore

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
)

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// printChanges lists a round's changes, sorted, as KEP-2104's ExampleStore does.
func printChanges(s *Store[string, string]) {
	var lines []string
	for _, it := range s.Changed() {
		lines = append(lines, fmt.Sprintf("%s %s=%q", it.State, it.Key, it.Value))
	}
	for _, it := range s.Unchanged() {
		lines = append(lines, fmt.Sprintf("%s %s", it.State, it.Key))
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "; "))
}

func ExampleStore() {
	store := New[string](hashString)

	store.Set("a", "hello a")
	store.Done()
	printChanges(store)

	store.Reset()
	store.Set("a", "hello a")
	store.Set("b", "hello b")
	store.Done()
	printChanges(store)

	store.Reset()
	store.Set("a", "bye a")
	store.Done()
	printChanges(store)

	store.Reset()
	store.Done()
	printChanges(store)
	// Output:
	// created a="hello a"
	// created b="hello b"; unchanged a
	// deleted b="hello b"; updated a="bye a"
	// deleted a="bye a"
}

func TestHashProtoSeesEveryField(t *testing.T) {
	a := &localv1.Endpoint{Ip: "10.0.0.1", Port: 80, Ready: true}
	b := &localv1.Endpoint{Ip: "10.0.0.1", Port: 80, Ready: true}
	if HashProto(a) != HashProto(b) {
		t.Error("equal messages hash differently")
	}
	b.InClusterSet = true
	if HashProto(a) == HashProto(b) {
		t.Error("a changed field does not change the hash")
	}
}

func TestSetAfterDonePanics(t *testing.T) {
	s := New[string](hashString)
	s.Done()
	defer func() {
		if recover() == nil {
			t.Error("Set after Done did not panic")
		}
	}()
	s.Set("a", "x")
}

func TestSetTwiceKeepsTheLastValue(t *testing.T) {
	s := New[string](hashString)
	s.Set("a", "1")
	s.Done()
	s.Reset()
	s.Set("a", "2")
	s.Set("a", "1") // changed back within the round
	s.Done()
	if s.HasChanges() {
		t.Errorf("changed back within a round: got changes %v", s.Changed())
	}
}

// FuzzStore checks the store against a model (two maps) over random rounds:
// every round's Created, Updated, Deleted and Unchanged are exactly the
// differences between the previous round's map and this one's.
func FuzzStore(f *testing.F) {
	f.Add([]byte{0x01, 0x12, 0x23, 0xff, 0x11, 0x25, 0xff, 0xff, 0x31})
	f.Add([]byte{0x10, 0x10, 0x11, 0xfe, 0x20, 0xff, 0x10})
	f.Fuzz(func(t *testing.T, program []byte) {
		s := New[byte](func(v byte) uint64 { return uint64(v) })
		prev, cur := map[byte]byte{}, map[byte]byte{}
		check := func() {
			want := map[State]map[byte]byte{Created: {}, Updated: {}, Deleted: {}, Unchanged: {}}
			for k, v := range cur {
				switch old, ok := prev[k]; {
				case !ok:
					want[Created][k] = v
				case old != v:
					want[Updated][k] = v
				default:
					want[Unchanged][k] = v
				}
			}
			for k, v := range prev {
				if _, ok := cur[k]; !ok {
					want[Deleted][k] = v
				}
			}
			got := map[State]map[byte]byte{
				Created: collect(s.Created()), Updated: collect(s.Updated()),
				Deleted: collect(s.Deleted()), Unchanged: collect(s.Unchanged()),
			}
			for st := range want {
				if !maps.Equal(got[st], want[st]) {
					t.Fatalf("%s: got %v, want %v", st, got[st], want[st])
				}
			}
			if len(s.Changed()) != len(want[Created])+len(want[Updated])+len(want[Deleted]) {
				t.Fatalf("Changed() has %d entries", len(s.Changed()))
			}
			if s.Len() != len(cur) {
				t.Fatalf("Len() = %d, want %d", s.Len(), len(cur))
			}
			for k, v := range cur {
				if got, ok := s.Get(k); !ok || got != v {
					t.Fatalf("Get(%d) = %d, %v; want %d", k, got, ok, v)
				}
			}
		}
		// Each byte: 0xff ends a round and starts the next; otherwise the
		// high nibble is a key and the low nibble a value.
		for _, b := range program {
			if b == 0xff {
				s.Done()
				check()
				s.Reset()
				prev, cur = cur, map[byte]byte{}
				continue
			}
			s.Set(b>>4, b&0xf)
			cur[b>>4] = b & 0xf
		}
		s.Done()
		check()
	})
}

func collect(items []*Item[byte, byte]) map[byte]byte {
	out := map[byte]byte{}
	for _, it := range items {
		out[it.Key] = it.Value
	}
	return out
}
