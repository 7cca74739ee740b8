package backend

import (
	"slices"
	"testing"
)

func TestQueue(t *testing.T) {
	k := func(n string) ServiceKey { return ServiceKey{Namespace: "ns", Name: n} }
	cases := []struct {
		name string
		in   []Changes // delivered in this order
		want Changes
	}{
		{"nothing", nil, Changes{}},
		{"set then delete", []Changes{{Set: []ServiceKey{k("x")}}, {Deleted: []ServiceKey{k("x")}}}, Changes{Deleted: []ServiceKey{k("x")}}},
		{"delete then set", []Changes{{Deleted: []ServiceKey{k("x")}}, {Set: []ServiceKey{k("x")}}}, Changes{Set: []ServiceKey{k("x")}}},
		{"union sorted", []Changes{{Set: []ServiceKey{k("b")}}, {Set: []ServiceKey{k("a"), k("b")}}, {Deleted: []ServiceKey{k("d"), k("c")}}},
			Changes{Set: []ServiceKey{k("a"), k("b")}, Deleted: []ServiceKey{k("c"), k("d")}}},
		{"reset absorbs what came before", []Changes{{Set: []ServiceKey{k("a")}}, {Reset: true}}, Changes{Reset: true}},
		{"reset absorbs what comes after", []Changes{{Reset: true}, {Set: []ServiceKey{k("a")}}}, Changes{Reset: true}},
		{"flags kept", []Changes{{Resync: true}, {NodeChanged: true}}, Changes{Resync: true, NodeChanged: true}},
	}
	for _, c := range cases {
		var q queue
		for _, ch := range c.in {
			q.add(ch)
		}
		got := q.changes()
		if got.Reset != c.want.Reset || got.Resync != c.want.Resync || got.NodeChanged != c.want.NodeChanged ||
			!slices.Equal(got.Set, c.want.Set) || !slices.Equal(got.Deleted, c.want.Deleted) {
			t.Errorf("%s: changes = %+v, want %+v", c.name, got, c.want)
		}
		if q.empty() != c.want.Empty() {
			t.Errorf("%s: empty = %v, want %v", c.name, q.empty(), c.want.Empty())
		}
	}
}

// After a sync, the queue starts again from what reset asks, and nothing
// of before.
func TestQueueReset(t *testing.T) {
	k := ServiceKey{Namespace: "ns", Name: "a"}
	var q queue
	q.add(Changes{Set: []ServiceKey{k}, NodeChanged: true})
	q.reset(Changes{})
	if !q.empty() {
		t.Fatalf("after reset: %+v, want empty", q.changes())
	}
	q.add(Changes{Deleted: []ServiceKey{k}})
	if got := q.changes(); got.NodeChanged || len(got.Set) != 0 || !slices.Equal(got.Deleted, []ServiceKey{k}) {
		t.Errorf("after reset and a delete: %+v", got)
	}
	q.reset(Changes{Reset: true})
	if got := q.changes(); !got.Reset || len(got.Deleted) != 0 {
		t.Errorf("after reset(Reset): %+v, want only Reset", got)
	}
}

// Folding changes in one by one costs what each holds: a thousand
// single-Service changes queued behind a minimum sync period.
func BenchmarkQueueAddOne(b *testing.B) {
	keys := make([]ServiceKey, 1000)
	for i := range keys {
		keys[i] = ServiceKey{Namespace: "ns", Name: string(rune('a'+i%26)) + string(rune('a'+i/26))}
	}
	b.ReportAllocs()
	for b.Loop() {
		var q queue
		for _, k := range keys {
			q.add(Changes{Set: []ServiceKey{k}})
		}
		if len(q.changes().Set) != len(keys) {
			b.Fatal("lost a key")
		}
	}
}
