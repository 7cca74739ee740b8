package host

import "github.com/kpng/kpng/api/localv1"

// ProtocolName is a service protocol's name in nftables and iptables rules
// ("tcp", "udp", "sctp"); "" for a protocol the model does not define.
func ProtocolName(p localv1.Protocol) string {
	switch p {
	case localv1.Protocol_TCP:
		return "tcp"
	case localv1.Protocol_UDP:
		return "udp"
	case localv1.Protocol_SCTP:
		return "sctp"
	}
	return ""
}
