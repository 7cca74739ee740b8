package nfacct

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
)

func message(t testing.TB, name string, pkts, bytes uint64) []byte {
	ae := netlink.NewAttributeEncoder()
	ae.String(attrName, name)
	ae.Bytes(attrPkts, binary.BigEndian.AppendUint64(nil, pkts))
	ae.Bytes(attrBytes, binary.BigEndian.AppendUint64(nil, bytes))
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0, 0, 0, 0}, b...)
}

func TestDecode(t *testing.T) {
	got, err := decode(message(t, InvalidDropped, 7, 420))
	if err != nil || got != (Counter{Name: InvalidDropped, Packets: 7, Bytes: 420}) {
		t.Errorf("decode = %+v, %v", got, err)
	}
	for name, data := range map[string][]byte{
		"short header":  {0, 0},
		"short counter": append([]byte{0, 0, 0, 0}, 8, 0, attrPkts, 0, 1, 2, 3, 4),
	} {
		if _, err := decode(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{LocalhostNodePortsAccepted, InvalidDropped, strings.Repeat("n", MaxNameLen)} {
		if err := checkName(name); err != nil {
			t.Errorf("checkName(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", strings.Repeat("n", MaxNameLen+1)} {
		if err := checkName(name); err == nil || !strings.Contains(err.Error(), "counter name") {
			t.Errorf("checkName(%q) = %v, want an error naming the counter name", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(message(f, LocalhostNodePortsAccepted, 1, 60))
	f.Add([]byte{0, 0, 0, 0, 5, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		decode(data) // must not panic
	})
}
