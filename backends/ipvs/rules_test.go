package ipvs

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kpng/kpng/proxyutil/host"
)

// TestClusterIPMasquerade: which traffic to a cluster IP is marked for
// masquerade, by how local traffic is told, as kube-proxy's ipvs mode
// writes it.
func TestClusterIPMasquerade(t *testing.T) {
	const (
		notLocal  = "-A KPNG-IPVS-SERVICES ! -s 10.244.0.0/16 -m set --match-set KPNG-CLUSTER-IP dst,dst -j KPNG-IPVS-MARK-MASQ"
		all       = "-A KPNG-IPVS-SERVICES -m set --match-set KPNG-CLUSTER-IP dst,dst -j KPNG-IPVS-MARK-MASQ"
		fromVIP   = "-A KPNG-IPVS-SERVICES -m set --match-set KPNG-CLUSTER-IP src,dst -j KPNG-IPVS-MARK-MASQ"
		dropLocal = "-A KPNG-IPVS-OUTPUT -m set --match-set KPNG-DROP dst,dst -j DROP"
	)
	for _, tc := range []struct {
		name string
		cfg  ruleConfig
		want string
	}{
		{"traffic not from the pods' CIDR", ruleConfig{local: host.LocalTraffic{CIDR: netip.MustParsePrefix("10.244.0.0/16")}}, notLocal},
		{"masquerade-all: every connection", ruleConfig{masqueradeAll: true}, all},
		{"no detection: the node's own connections, which leave from the cluster IP", ruleConfig{}, fromVIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range strings.Split(string(rulesScript(tc.cfg)), "\n") {
				if strings.Contains(l, "KPNG-CLUSTER-IP") && strings.Contains(l, "MARK-MASQ") {
					got = append(got, l)
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("masquerade rules of cluster IPs:\n%s\nwant only\n%s", strings.Join(got, "\n"), tc.want)
			}
			// The node's own connections to a Local policy without local
			// endpoints are dropped before IPVS refuses them.
			if !strings.Contains(string(rulesScript(tc.cfg)), "*mangle\n:KPNG-IPVS-OUTPUT - [0:0]\n"+dropLocal+"\nCOMMIT\n") {
				t.Errorf("no mangle OUTPUT drop in:\n%s", rulesScript(tc.cfg))
			}
		})
	}
}
