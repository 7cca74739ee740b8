package host

import (
	"errors"
	"fmt"
	"net/netip"
)

// Detect-local modes, as kube-proxy's --detect-local-mode.
const (
	LocalModeClusterCIDR         = "ClusterCIDR"
	LocalModeNodeCIDR            = "NodeCIDR"
	LocalModeBridgeInterface     = "BridgeInterface"
	LocalModeInterfaceNamePrefix = "InterfaceNamePrefix"
	LocalModeNone                = "None"
)

// ValidateLocalDetection checks a detect-local mode and the setting it
// needs.
func ValidateLocalDetection(mode, bridge, prefix string) error {
	switch mode {
	case "", LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeNone:
	case LocalModeBridgeInterface:
		if bridge == "" {
			return errors.New("--detect-local-mode=BridgeInterface needs --pod-bridge-interface")
		}
	case LocalModeInterfaceNamePrefix:
		if prefix == "" {
			return errors.New("--detect-local-mode=InterfaceNamePrefix needs --pod-interface-name-prefix")
		}
	default:
		return fmt.Errorf("--detect-local-mode %q: want one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix, None", mode)
	}
	return nil
}

// LocalTraffic is how one family's packets from this node's pods are told
// from others: by source CIDR, by input interface, or by the prefix of the
// input interface's name. At most one is set; none when the mode cannot
// tell (None, or no CIDR of the family known).
type LocalTraffic struct {
	// CIDR: packets from this prefix are local (ClusterCIDR, NodeCIDR).
	CIDR netip.Prefix
	// Interface: packets that came in on it are local (BridgeInterface).
	Interface string
	// InterfacePrefix: packets that came in on an interface whose name
	// starts with it are local (InterfaceNamePrefix), as the user gave it.
	InterfacePrefix string
}

// Detected reports whether local traffic can be told at all.
func (l LocalTraffic) Detected() bool {
	return l.CIDR.IsValid() || l.Interface != "" || l.InterfacePrefix != ""
}

// DetectLocal decides how to tell local traffic of a family (ipv6 or not)
// under c's detect-local mode; podCIDRs are the node's pod CIDRs, which
// NodeCIDR mode uses. As kube-proxy, a mode by CIDR uses the first CIDR of
// the family, masked.
func DetectLocal(c *Config, ipv6 bool, podCIDRs []string) LocalTraffic {
	byCIDR := func(cidrs []string) LocalTraffic {
		for _, s := range cidrs {
			if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() == ipv6 {
				return LocalTraffic{CIDR: p.Masked()}
			}
		}
		return LocalTraffic{}
	}
	switch c.DetectLocalMode {
	case LocalModeClusterCIDR, "":
		return byCIDR(c.ClusterCIDRs)
	case LocalModeNodeCIDR:
		return byCIDR(podCIDRs)
	case LocalModeBridgeInterface:
		return LocalTraffic{Interface: c.PodBridgeInterface}
	case LocalModeInterfaceNamePrefix:
		return LocalTraffic{InterfacePrefix: c.PodInterfaceNamePrefix}
	}
	return LocalTraffic{}
}
