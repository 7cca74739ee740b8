package host

import (
	"net/netip"
	"slices"
	"testing"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestNodePorts(t *testing.T) {
	local := addrs("127.0.0.1", "192.168.1.10", "10.0.0.5", "::1", "fd00::10", "192.168.1.10")
	for _, tc := range []struct {
		name     string
		list     []string
		ipv6     bool
		primary  string
		all      bool
		loopback bool
		want     []netip.Addr
	}{
		{name: "no CIDRs: every address", all: true, loopback: true},
		{name: "no CIDRs, IPv6: every address, no IPv4 loopback", ipv6: true, all: true},
		{name: "only the other family's CIDRs: every address", list: []string{"fd00::/64"}, all: true, loopback: true},
		{name: "a /0: every address", list: []string{"192.168.0.0/16", "0.0.0.0/0"}, all: true, loopback: true},
		{name: "CIDRs: the addresses within, in order, once", list: []string{"192.168.0.0/16", "10.0.0.0/8", "fd00::/64"}, want: addrs("192.168.1.10", "10.0.0.5")},
		{name: "CIDR of IPv6", list: []string{"192.168.0.0/16", "fd00::/64"}, ipv6: true, want: addrs("fd00::10")},
		{name: "a CIDR holding 127.0.0.1 contains loopback", list: []string{"127.0.0.0/8"}, loopback: true, want: addrs("127.0.0.1")},
		{name: "an unmasked CIDR is masked", list: []string{"10.9.9.9/8"}, want: addrs("10.0.0.5")},
		{name: "primary: the primary IP", list: []string{"primary"}, primary: "192.168.1.10", want: addrs("192.168.1.10")},
		{name: "primary without a primary IP: every address", list: []string{"primary"}, all: true},
		{name: "primary on loopback: every address", list: []string{"primary"}, primary: "127.0.0.1", all: true, want: addrs("127.0.0.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var primary netip.Addr
			if tc.primary != "" {
				primary = netip.MustParseAddr(tc.primary)
			}
			np := NodePortsOf(tc.list, tc.ipv6)
			if got := np.AllAddresses(primary); got != tc.all {
				t.Errorf("AllAddresses = %v, want %v (%+v)", got, tc.all, np)
			}
			if np.ContainsLoopback != tc.loopback {
				t.Errorf("ContainsLoopback = %v, want %v", np.ContainsLoopback, tc.loopback)
			}
			if tc.all && tc.want == nil {
				return
			}
			if got := np.Addresses(tc.ipv6, primary, local); !slices.Equal(got, tc.want) {
				t.Errorf("Addresses = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateNodePortAddresses(t *testing.T) {
	for _, tc := range []struct {
		name string
		list []string
		ok   bool
	}{
		{name: "none", ok: true},
		{name: "primary alone", list: []string{"primary"}, ok: true},
		{name: "CIDRs of both families", list: []string{"10.0.0.0/8", "fd00::/64"}, ok: true},
		{name: "primary with a CIDR", list: []string{"primary", "10.0.0.0/8"}},
		{name: "an address is no CIDR", list: []string{"10.0.0.1"}},
	} {
		if err := ValidateNodePortAddresses(tc.list); (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
