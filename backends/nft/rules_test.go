package nft

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
)

// The fixed ruleset of an IPv4 table with the default flags: upstream
// kube-proxy's, rule for rule.
const wantFixedIPv4 = `
add table ip kpng { comment "rules for kpng" ; }
add chain ip kpng cluster-ips-check
add chain ip kpng filter-forward { type filter hook forward priority 0 ; }
add chain ip kpng filter-input { type filter hook input priority 0 ; }
add chain ip kpng filter-output { type filter hook output priority 0 ; }
add chain ip kpng filter-output-pre-dnat { type filter hook output priority -110 ; }
add chain ip kpng filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
add chain ip kpng firewall-check
add chain ip kpng masquerading
add chain ip kpng nat-output { type nat hook output priority -100 ; }
add chain ip kpng nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kpng nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kpng nodeport-endpoints-check
add chain ip kpng reject-chain
add chain ip kpng service-endpoints-check
add chain ip kpng services
add set ip kpng cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }
add set ip kpng hairpin-connections { type ipv4_addr . ipv4_addr . inet_proto . inet_service ; comment "service hairpin connections" ; }
add set ip kpng nodeport-ips { type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }
add map ip kpng firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add map ip kpng no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }
add map ip kpng no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }
add map ip kpng service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add map ip kpng service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }
add rule ip kpng cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
add rule ip kpng cluster-ips-check ip daddr { 10.96.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"
add rule ip kpng filter-forward ct state new jump service-endpoints-check
add rule ip kpng filter-forward ct state new jump cluster-ips-check
add rule ip kpng filter-input ct state new jump nodeport-endpoints-check
add rule ip kpng filter-input ct state new jump service-endpoints-check
add rule ip kpng filter-output ct state new jump service-endpoints-check
add rule ip kpng filter-output ct state new jump cluster-ips-check
add rule ip kpng filter-output-pre-dnat ct state new jump firewall-check
add rule ip kpng filter-prerouting-pre-dnat ct state new jump firewall-check
add rule ip kpng firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips
add rule ip kpng masquerading mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random
add rule ip kpng masquerading ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
add rule ip kpng nat-output jump services
add rule ip kpng nat-postrouting jump masquerading
add rule ip kpng nat-prerouting jump services
add rule ip kpng nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip kpng reject-chain reject
add rule ip kpng service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip kpng services ip daddr @cluster-ips ip saddr != 10.0.0.0/16 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"
add rule ip kpng services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kpng services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
add element ip kpng nodeport-ips { 192.168.0.10 }
`

func TestFixedRuleset(t *testing.T) {
	f := newFixture(t, testConfig())
	f.sync(backend.Changes{})
	if got := dump(f.fake4); strings.TrimSpace(got) != strings.TrimSpace(wantFixedIPv4) {
		t.Errorf("IPv4 table:\n%s\nwant:\n%s", got, wantFixedIPv4)
	}
}

// TestFixedRulesetFlags checks the rules each flag changes.
func TestFixedRulesetFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      func(*Config)
		want     []string // lines that must be in the IPv4 dump
		wantNot  []string // lines that must not
		wantIPv6 []string
	}{{
		name:    "masquerade-all masquerades every cluster IP connection",
		cfg:     func(c *Config) { c.MasqueradeAll = true },
		want:    []string{`add rule ip kpng services ip daddr @cluster-ips mark set mark or 0x00004000 comment "masquerade all clusterIP traffic"`},
		wantNot: []string{`add rule ip kpng services ip daddr @cluster-ips ip saddr != 10.0.0.0/16 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`},
	}, {
		name:    "no local detection: no off-cluster masquerade rule",
		cfg:     func(c *Config) { c.DetectLocalMode = host.LocalModeNone },
		wantNot: []string{`add rule ip kpng services ip daddr @cluster-ips ip saddr != 10.0.0.0/16 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`},
	}, {
		name:     "detect local by node CIDR uses the node's pod CIDR",
		cfg:      func(c *Config) { c.DetectLocalMode = host.LocalModeNodeCIDR },
		want:     []string{`add rule ip kpng services ip daddr @cluster-ips ip saddr != 10.0.1.0/24 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`},
		wantIPv6: []string{`add rule ip6 kpng services ip6 daddr @cluster-ips ip6 saddr != fd01:1::/64 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`},
	}, {
		name: "detect local by bridge interface",
		cfg:  func(c *Config) { c.DetectLocalMode, c.PodBridgeInterface = host.LocalModeBridgeInterface, "cbr0" },
		want: []string{`add rule ip kpng services ip daddr @cluster-ips iifname != cbr0 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`},
	}, {
		name: "detect local by interface name prefix",
		cfg: func(c *Config) {
			c.DetectLocalMode, c.PodInterfaceNamePrefix = host.LocalModeInterfaceNamePrefix, "veth"
		},
		want: []string{`add rule ip kpng services ip daddr @cluster-ips iifname != veth* mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"`},
	}, {
		name: "nodeport addresses by CIDR: the local addresses inside; IPv6 without a CIDR accepts on all",
		cfg:  func(c *Config) { c.NodePortAddresses = []string{"172.16.0.0/12", "192.168.0.0/16"} },
		want: []string{"add element ip kpng nodeport-ips { 172.16.0.10 }", "add element ip kpng nodeport-ips { 192.168.0.10 }"},
		wantIPv6: []string{
			"add rule ip6 kpng services fib daddr type local ip6 daddr != ::1 meta l4proto . th dport vmap @service-nodeports",
			"add rule ip6 kpng nodeport-endpoints-check ip6 daddr != ::1 meta l4proto . th dport vmap @no-endpoint-nodeports",
		},
	}, {
		name: "nodeport addresses 0.0.0.0/0: every local address but loopback",
		cfg:  func(c *Config) { c.NodePortAddresses = []string{"0.0.0.0/0"} },
		want: []string{
			"add rule ip kpng services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports",
			"add rule ip kpng nodeport-endpoints-check ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports",
		},
		wantNot: []string{"add element ip kpng nodeport-ips { 192.168.0.10 }"},
	}, {
		name: "another masquerade bit",
		cfg:  func(c *Config) { c.MasqueradeBit = 3 },
		want: []string{"add rule ip kpng masquerading mark and 0x00000008 != 0 mark set mark xor 0x00000008 masquerade fully-random"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.cfg(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, cfg)
			f.sync(backend.Changes{})
			d4, d6 := dump(f.fake4), dump(f.fake6)
			for _, l := range tc.want {
				if !strings.Contains(d4, l+"\n") {
					t.Errorf("missing %q in:\n%s", l, d4)
				}
			}
			for _, l := range tc.wantNot {
				if strings.Contains(d4, l+"\n") {
					t.Errorf("unexpected %q", l)
				}
			}
			for _, l := range tc.wantIPv6 {
				if !strings.Contains(d6, l+"\n") {
					t.Errorf("missing %q in:\n%s", l, d6)
				}
			}
		})
	}
}

// TestServiceRules: the objects each kind of service adds to the fixed
// ruleset, as upstream kube-proxy writes them.
func TestServiceRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		service *localv1.ServiceEndpoints
		want    string
	}{
		{
			name:    "NodePort, Cluster policy, an endpoint on this node",
			service: richServices()[0],
			want: `
add chain ip kpng external-Y6QD5CCT-ns/web/tcp/http
add chain ip kpng service-Y6QD5CCT-ns/web/tcp/http
add map ip kpng ep-7DOIQCC7AFBIJCG7 { typeof numgen random mod 65536 : ip daddr . tcp dport ; flags interval ; }
add rule ip kpng external-Y6QD5CCT-ns/web/tcp/http mark set mark or 0x00004000 comment "masquerade"
add rule ip kpng external-Y6QD5CCT-ns/web/tcp/http goto service-Y6QD5CCT-ns/web/tcp/http
add rule ip kpng service-Y6QD5CCT-ns/web/tcp/http meta l4proto tcp dnat ip to numgen random mod 65536 map @ep-7DOIQCC7AFBIJCG7
add element ip kpng cluster-ips { 10.96.0.5 }
add element ip kpng hairpin-connections { 10.0.1.5 . 10.0.1.5 . tcp . 8080 }
add element ip kpng ep-7DOIQCC7AFBIJCG7 { 0-32767 : 10.0.1.5 . 8080 }
add element ip kpng ep-7DOIQCC7AFBIJCG7 { 32768-65535 : 10.0.2.5 . 8080 }
add element ip kpng service-ips { 10.96.0.5 . tcp . 80 : goto service-Y6QD5CCT-ns/web/tcp/http }
add element ip kpng service-nodeports { tcp . 30080 : goto external-Y6QD5CCT-ns/web/tcp/http }
`,
		},
		{
			name:    "LoadBalancer, Local external policy, source ranges holding the node IP, an external IP",
			service: richServices()[1],
			want: `
add chain ip kpng external-XI5Y37DP-ns/lb/tcp/https
add chain ip kpng firewall-XI5Y37DP-ns/lb/tcp/https
add chain ip kpng local-XI5Y37DP-ns/lb/tcp/https
add chain ip kpng service-XI5Y37DP-ns/lb/tcp/https
add map ip kpng ep-HO6M4MUMQOQODXT6 { typeof numgen random mod 65536 : ip daddr . tcp dport ; flags interval ; }
add map ip kpng ep-LYHXN2GNWI5TBW7D { typeof numgen random mod 65536 : ip daddr . tcp dport ; flags interval ; }
add rule ip kpng external-XI5Y37DP-ns/lb/tcp/https ip saddr 10.0.0.0/16 goto service-XI5Y37DP-ns/lb/tcp/https comment "short-circuit pod traffic"
add rule ip kpng external-XI5Y37DP-ns/lb/tcp/https fib saddr type local mark set mark or 0x00004000 comment "masquerade local traffic"
add rule ip kpng external-XI5Y37DP-ns/lb/tcp/https fib saddr type local goto service-XI5Y37DP-ns/lb/tcp/https comment "short-circuit local traffic"
add rule ip kpng external-XI5Y37DP-ns/lb/tcp/https goto local-XI5Y37DP-ns/lb/tcp/https
add rule ip kpng firewall-XI5Y37DP-ns/lb/tcp/https ip saddr != { 192.168.0.0/24, 203.0.113.0/24, 203.0.113.7 } drop
add rule ip kpng local-XI5Y37DP-ns/lb/tcp/https meta l4proto tcp dnat ip to numgen random mod 65536 map @ep-LYHXN2GNWI5TBW7D
add rule ip kpng service-XI5Y37DP-ns/lb/tcp/https meta l4proto tcp dnat ip to numgen random mod 65536 map @ep-HO6M4MUMQOQODXT6
add element ip kpng cluster-ips { 10.96.0.6 }
add element ip kpng hairpin-connections { 10.0.1.6 . 10.0.1.6 . tcp . 8443 }
add element ip kpng ep-HO6M4MUMQOQODXT6 { 0-32767 : 10.0.1.6 . 8443 }
add element ip kpng ep-HO6M4MUMQOQODXT6 { 32768-65535 : 10.0.2.6 . 8443 }
add element ip kpng ep-LYHXN2GNWI5TBW7D { 0-65535 : 10.0.1.6 . 8443 }
add element ip kpng firewall-ips { 203.0.113.7 . tcp . 443 : goto firewall-XI5Y37DP-ns/lb/tcp/https }
add element ip kpng service-ips { 10.96.0.6 . tcp . 443 : goto service-XI5Y37DP-ns/lb/tcp/https }
add element ip kpng service-ips { 198.51.100.7 . tcp . 443 : goto external-XI5Y37DP-ns/lb/tcp/https }
add element ip kpng service-ips { 203.0.113.7 . tcp . 443 : goto external-XI5Y37DP-ns/lb/tcp/https }
add element ip kpng service-nodeports { tcp . 30443 : goto external-XI5Y37DP-ns/lb/tcp/https }
`,
		},
		{
			name:    "no endpoints: reject on every address",
			service: richServices()[2],
			want: `
add element ip kpng cluster-ips { 10.96.0.7 }
add element ip kpng no-endpoint-nodeports { tcp . 30081 comment "ns/empty:p" : goto reject-chain }
add element ip kpng no-endpoint-services { 10.96.0.7 . tcp . 81 comment "ns/empty:p" : goto reject-chain }
add element ip kpng no-endpoint-services { 198.51.100.8 . tcp . 81 comment "ns/empty:p" : goto reject-chain }
`,
		},
		{
			name:    "ClientIP affinity",
			service: richServices()[3],
			want: `
add chain ip kpng endpoint-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80
add chain ip kpng endpoint-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80
add chain ip kpng service-OALSTAW3-ns/sticky/tcp/
add set ip kpng affinity-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add set ip kpng affinity-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add rule ip kpng endpoint-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80 update @affinity-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80 { ip saddr }
add rule ip kpng endpoint-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80 meta l4proto tcp dnat to 10.0.2.8:80
add rule ip kpng endpoint-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80 update @affinity-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80 { ip saddr }
add rule ip kpng endpoint-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80 meta l4proto tcp dnat to 10.0.3.8:80
add rule ip kpng service-OALSTAW3-ns/sticky/tcp/ ip saddr @affinity-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80 goto endpoint-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80
add rule ip kpng service-OALSTAW3-ns/sticky/tcp/ ip saddr @affinity-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80 goto endpoint-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80
add rule ip kpng service-OALSTAW3-ns/sticky/tcp/ numgen random mod 2 vmap { 0 : goto endpoint-L2SIDU7P-ns/sticky/tcp/__10.0.2.8/80 , 1 : goto endpoint-M5SSVK7K-ns/sticky/tcp/__10.0.3.8/80 }
add element ip kpng cluster-ips { 10.96.0.8 }
add element ip kpng service-ips { 10.96.0.8 . tcp . 82 : goto service-OALSTAW3-ns/sticky/tcp/ }
`,
		},
		{
			name:    "Local internal policy without local endpoints: drop",
			service: richServices()[4],
			want: `
add element ip kpng cluster-ips { 10.96.0.9 }
add element ip kpng no-endpoint-services { 10.96.0.9 . udp . 53 comment "ns/nolocal:p" : drop }
`,
		},
		{
			name:    "two protocols on one port number",
			service: richServices()[5],
			want: `
add chain ip kpng service-2YY5BS5C-kube-system/dns/udp/dns
add chain ip kpng service-PXHAI4EJ-kube-system/dns/tcp/dns-tcp
add map ip kpng ep-BVU3S7UHJ3XENFDT { typeof numgen random mod 65536 : ip daddr . tcp dport ; flags interval ; }
add map ip kpng ep-DWZTWQ6ZM5ONLVKW { typeof numgen random mod 65536 : ip daddr . udp dport ; flags interval ; }
add rule ip kpng service-2YY5BS5C-kube-system/dns/udp/dns meta l4proto udp dnat ip to numgen random mod 65536 map @ep-DWZTWQ6ZM5ONLVKW
add rule ip kpng service-PXHAI4EJ-kube-system/dns/tcp/dns-tcp meta l4proto tcp dnat ip to numgen random mod 65536 map @ep-BVU3S7UHJ3XENFDT
add element ip kpng cluster-ips { 10.96.0.10 }
add element ip kpng ep-BVU3S7UHJ3XENFDT { 0-65535 : 10.0.2.10 . 53 }
add element ip kpng ep-DWZTWQ6ZM5ONLVKW { 0-65535 : 10.0.2.10 . 53 }
add element ip kpng service-ips { 10.96.0.10 . tcp . 53 : goto service-PXHAI4EJ-kube-system/dns/tcp/dns-tcp }
add element ip kpng service-ips { 10.96.0.10 . udp . 53 : goto service-2YY5BS5C-kube-system/dns/udp/dns }
`,
		},
		{
			name:    "IPv6 NodePort with affinity",
			service: richServices()[6],
			want: `
add chain ip6 kpng endpoint-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080
add chain ip6 kpng endpoint-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080
add chain ip6 kpng external-Y6QD5CCT-ns/web/tcp/http
add chain ip6 kpng service-Y6QD5CCT-ns/web/tcp/http
add set ip6 kpng affinity-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080 { type ipv6_addr ; flags dynamic,timeout ; timeout 60s ; }
add set ip6 kpng affinity-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080 { type ipv6_addr ; flags dynamic,timeout ; timeout 60s ; }
add rule ip6 kpng endpoint-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080 update @affinity-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080 { ip6 saddr }
add rule ip6 kpng endpoint-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080 meta l4proto tcp dnat to [fd01:1::5]:8080
add rule ip6 kpng endpoint-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080 update @affinity-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080 { ip6 saddr }
add rule ip6 kpng endpoint-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080 meta l4proto tcp dnat to [fd01:2::5]:8080
add rule ip6 kpng external-Y6QD5CCT-ns/web/tcp/http mark set mark or 0x00004000 comment "masquerade"
add rule ip6 kpng external-Y6QD5CCT-ns/web/tcp/http goto service-Y6QD5CCT-ns/web/tcp/http
add rule ip6 kpng service-Y6QD5CCT-ns/web/tcp/http ip6 saddr @affinity-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080 goto endpoint-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080
add rule ip6 kpng service-Y6QD5CCT-ns/web/tcp/http ip6 saddr @affinity-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080 goto endpoint-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080
add rule ip6 kpng service-Y6QD5CCT-ns/web/tcp/http numgen random mod 2 vmap { 0 : goto endpoint-25ERDNNR-ns/web/tcp/http__fd01.1..5/8080 , 1 : goto endpoint-33VRJDQP-ns/web/tcp/http__fd01.2..5/8080 }
add element ip6 kpng cluster-ips { fd00:96::5 }
add element ip6 kpng hairpin-connections { fd01:1::5 . fd01:1::5 . tcp . 8080 }
add element ip6 kpng service-ips { fd00:96::5 . tcp . 80 : goto service-Y6QD5CCT-ns/web/tcp/http }
add element ip6 kpng service-nodeports { tcp . 30080 : goto external-Y6QD5CCT-ns/web/tcp/http }
`,
		},
		{
			name:    "IPv6 LoadBalancer, Local policy, no local endpoint: drop external traffic",
			service: richServices()[7],
			want: `
add chain ip6 kpng external-XI5Y37DP-ns/lb/tcp/https
add chain ip6 kpng firewall-XI5Y37DP-ns/lb/tcp/https
add chain ip6 kpng service-XI5Y37DP-ns/lb/tcp/https
add map ip6 kpng ep-HO6M4MUMQOQODXT6 { typeof numgen random mod 65536 : ip6 daddr . tcp dport ; flags interval ; }
add rule ip6 kpng external-XI5Y37DP-ns/lb/tcp/https ip6 saddr fd01::/48 goto service-XI5Y37DP-ns/lb/tcp/https comment "short-circuit pod traffic"
add rule ip6 kpng external-XI5Y37DP-ns/lb/tcp/https fib saddr type local mark set mark or 0x00004000 comment "masquerade local traffic"
add rule ip6 kpng external-XI5Y37DP-ns/lb/tcp/https fib saddr type local goto service-XI5Y37DP-ns/lb/tcp/https comment "short-circuit local traffic"
add rule ip6 kpng firewall-XI5Y37DP-ns/lb/tcp/https ip6 saddr != { 2001:db8::/64 } drop
add rule ip6 kpng service-XI5Y37DP-ns/lb/tcp/https meta l4proto tcp dnat ip6 to numgen random mod 65536 map @ep-HO6M4MUMQOQODXT6
add element ip6 kpng cluster-ips { fd00:96::6 }
add element ip6 kpng ep-HO6M4MUMQOQODXT6 { 0-65535 : fd01:2::6 . 8443 }
add element ip6 kpng firewall-ips { 2001:db8::7 . tcp . 443 : goto firewall-XI5Y37DP-ns/lb/tcp/https }
add element ip6 kpng no-endpoint-nodeports { tcp . 30443 comment "ns/lb:https" : drop }
add element ip6 kpng no-endpoint-services { 2001:db8::7 . tcp . 443 comment "ns/lb:https" : drop }
add element ip6 kpng service-ips { 2001:db8::7 . tcp . 443 : goto external-XI5Y37DP-ns/lb/tcp/https }
add element ip6 kpng service-ips { fd00:96::6 . tcp . 443 : goto service-XI5Y37DP-ns/lb/tcp/https }
add element ip6 kpng service-nodeports { tcp . 30443 : goto external-XI5Y37DP-ns/lb/tcp/https }
`,
		}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, testConfig())
			f.sync(backend.Changes{})
			base4, base6 := dump(f.fake4), dump(f.fake6)
			f.set(tc.service)
			got := linesNotIn(dump(f.fake4), base4) + linesNotIn(dump(f.fake6), base6)
			got = strings.ReplaceAll(got, "\n\n", "\n")
			if strings.TrimSpace(got) != strings.TrimSpace(tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
			// Deleting the service leaves the fixed ruleset (and empty
			// chains, deleted later).
			f.del(backend.KeyOf(tc.service))
			f.clock = f.clock.Add(staleDelay)
			f.sync(backend.Changes{})
			if d := dump(f.fake4); d != base4 {
				t.Errorf("after deletion, IPv4 differs from the fixed ruleset by:\n%s", linesNotIn(d, base4))
			}
			if d := dump(f.fake6); d != base6 {
				t.Errorf("after deletion, IPv6 differs from the fixed ruleset by:\n%s", linesNotIn(d, base6))
			}
		})
	}
}

// TestEndpointMapSlots: endpoint i of n gets its share of 0-65535, the
// shares tile the range exactly; a port with more endpoints than slots
// falls back to a constant map in its rule.
func TestEndpointMapSlots(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 10, 1000, endpointSlots} {
		next := 0
		for i := range n {
			lo, hi, err := parseSlots(endpointSlot(i, n))
			if err != nil || int(lo) != next || hi < lo {
				t.Fatalf("n=%d: endpoint %d has %q (%v); want an interval from %d", n, i, endpointSlot(i, n), err, next)
			}
			if size := int(hi-lo) + 1; size < endpointSlots/n || size > endpointSlots/n+1 {
				t.Fatalf("n=%d: endpoint %d has %d slots, want %d or %d", n, i, size, endpointSlots/n, endpointSlots/n+1)
			}
			next = int(hi) + 1
		}
		if next != endpointSlots {
			t.Fatalf("n=%d: the slots end at %d, want %d", n, next, endpointSlots)
		}
	}

	var opts []svcOpt
	opts = append(opts, port("p", tcp, 80, 0, true))
	for i := range endpointSlots + 1 {
		opts = append(opts, ep("p", tcp, fmt.Sprintf("10.%d.%d.%d", 1+i>>16, i>>8&255, i&255), 8080, "cluster"))
	}
	f := newFixture(t, testConfig())
	p := servicePart(f.b.env(ipv4, f.state), service("ns", "huge", "10.96.0.9", opts...), nil)
	if len(p.sets) != 0 {
		t.Errorf("%d endpoints got an endpoint map of %d slots", endpointSlots+1, endpointSlots)
	}
	for _, c := range p.chains {
		if strings.HasPrefix(c.name, clusterChainPrefix) && !strings.Contains(c.rules[0].text, fmt.Sprintf("numgen random mod %d map {", endpointSlots+1)) {
			t.Errorf("the service chain of %d endpoints: %.120s...; want a constant map of them all", endpointSlots+1, c.rules[0].text)
		}
	}
}
