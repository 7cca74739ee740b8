package backend

import (
	"slices"
	"testing"
)

func TestMerge(t *testing.T) {
	k := func(n string) ServiceKey { return ServiceKey{Namespace: "ns", Name: n} }
	cases := []struct {
		name string
		a, b Changes
		want Changes
	}{
		{"set then delete", Changes{Set: []ServiceKey{k("x")}}, Changes{Deleted: []ServiceKey{k("x")}}, Changes{Deleted: []ServiceKey{k("x")}}},
		{"delete then set", Changes{Deleted: []ServiceKey{k("x")}}, Changes{Set: []ServiceKey{k("x")}}, Changes{Set: []ServiceKey{k("x")}}},
		{"union sorted", Changes{Set: []ServiceKey{k("b")}}, Changes{Set: []ServiceKey{k("a"), k("b")}}, Changes{Set: []ServiceKey{k("a"), k("b")}}},
		{"reset absorbs", Changes{Reset: true}, Changes{Set: []ServiceKey{k("a")}}, Changes{Reset: true}},
		{"flags kept", Changes{Resync: true}, Changes{NodeChanged: true}, Changes{Resync: true, NodeChanged: true}},
	}
	for _, c := range cases {
		got := merge(c.a, c.b)
		if got.Reset != c.want.Reset || got.Resync != c.want.Resync || got.NodeChanged != c.want.NodeChanged ||
			!slices.Equal(got.Set, c.want.Set) || !slices.Equal(got.Deleted, c.want.Deleted) {
			t.Errorf("%s: merge = %+v, want %+v", c.name, got, c.want)
		}
	}
}
