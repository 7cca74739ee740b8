package host

import (
	"net/netip"
	"testing"
)

func TestDetectLocal(t *testing.T) {
	cluster := []string{"10.244.0.0/16", "fd00:10:244::/48"}
	pods := []string{"10.244.1.0/24"}
	for _, tc := range []struct {
		name   string
		mode   string
		ipv6   bool
		cidrs  []string
		want   LocalTraffic
		detect bool
	}{
		{name: "cluster CIDR of the family", mode: LocalModeClusterCIDR, cidrs: cluster, want: LocalTraffic{CIDR: netip.MustParsePrefix("10.244.0.0/16")}, detect: true},
		{name: "empty mode is ClusterCIDR", mode: "", ipv6: true, cidrs: cluster, want: LocalTraffic{CIDR: netip.MustParsePrefix("fd00:10:244::/48")}, detect: true},
		{name: "cluster CIDR masked", mode: LocalModeClusterCIDR, cidrs: []string{"10.244.3.7/16"}, want: LocalTraffic{CIDR: netip.MustParsePrefix("10.244.0.0/16")}, detect: true},
		{name: "first CIDR of the family wins", mode: LocalModeClusterCIDR, cidrs: []string{"fd00::/64", "10.1.0.0/16", "10.2.0.0/16"}, want: LocalTraffic{CIDR: netip.MustParsePrefix("10.1.0.0/16")}, detect: true},
		{name: "no cluster CIDR of the family: cannot tell", mode: LocalModeClusterCIDR, ipv6: true, cidrs: []string{"10.244.0.0/16"}},
		{name: "node CIDR from the node's pod CIDRs", mode: LocalModeNodeCIDR, cidrs: cluster, want: LocalTraffic{CIDR: netip.MustParsePrefix("10.244.1.0/24")}, detect: true},
		{name: "node CIDR of a family the node lacks: cannot tell", mode: LocalModeNodeCIDR, ipv6: true, cidrs: cluster},
		{name: "bridge interface", mode: LocalModeBridgeInterface, want: LocalTraffic{Interface: "cbr0"}, detect: true},
		{name: "interface prefix as given", mode: LocalModeInterfaceNamePrefix, ipv6: true, want: LocalTraffic{InterfacePrefix: "veth"}, detect: true},
		{name: "None never tells", mode: LocalModeNone, cidrs: cluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{DetectLocalMode: tc.mode, ClusterCIDRs: tc.cidrs, PodBridgeInterface: "cbr0", PodInterfaceNamePrefix: "veth"}
			got := DetectLocal(c, tc.ipv6, pods)
			if got != tc.want || got.Detected() != tc.detect {
				t.Errorf("DetectLocal = %+v (detected %v), want %+v (%v)", got, got.Detected(), tc.want, tc.detect)
			}
		})
	}
}

func TestValidateLocalDetection(t *testing.T) {
	for _, tc := range []struct {
		name, mode, bridge, prefix string
		ok                         bool
	}{
		{name: "empty mode", ok: true},
		{name: "ClusterCIDR", mode: LocalModeClusterCIDR, ok: true},
		{name: "NodeCIDR", mode: LocalModeNodeCIDR, ok: true},
		{name: "None", mode: LocalModeNone, ok: true},
		{name: "bridge mode with a bridge", mode: LocalModeBridgeInterface, bridge: "cbr0", ok: true},
		{name: "bridge mode without a bridge", mode: LocalModeBridgeInterface},
		{name: "prefix mode with a prefix", mode: LocalModeInterfaceNamePrefix, prefix: "veth", ok: true},
		{name: "prefix mode without a prefix", mode: LocalModeInterfaceNamePrefix},
		{name: "unknown mode", mode: "PodCIDR"},
	} {
		if err := ValidateLocalDetection(tc.mode, tc.bridge, tc.prefix); (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
