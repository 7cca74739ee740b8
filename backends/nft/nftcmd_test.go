package nft

import (
	"strings"
	"testing"
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
