package host

import "fmt"

// ValidateMasqueradeBit checks --iptables-masquerade-bit: a bit of the
// 32-bit packet mark.
func ValidateMasqueradeBit(bit int) error {
	if bit < 0 || bit > 31 {
		return fmt.Errorf("--iptables-masquerade-bit %d: must be within [0, 31]", bit)
	}
	return nil
}

// MasqueradeMark is the packet mark that asks for masquerading: the one
// bit of --iptables-masquerade-bit, as kube-proxy sets it.
func MasqueradeMark(bit int) uint32 { return 1 << uint(bit) }
