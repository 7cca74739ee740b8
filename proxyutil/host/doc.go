// Package host holds the host-side kube-proxy decisions that every Linux
// backend shares, written once: which packets count as local traffic
// (--detect-local-mode), which addresses accept node ports
// (--nodeport-addresses), the masquerade mark, the flags and validation of
// those settings, and the helpers kube-proxy runs beside its rules
// (metrics, health servers, stale conntrack cleaning).
//
// Each decision is a pure function of the configuration and the node's
// view, with a table test beside it; a backend only renders the result in
// its own syntax (nft expressions, iptables matches). The few functions
// that touch the host (InterfaceAddrs, StartHelpers) say so.
package host
