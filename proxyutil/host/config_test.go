package host

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
)

func valid() Config {
	return Config{NodePortAddresses: []string{"primary"}, MasqueradeBit: 14, SyncPeriod: 30 * time.Second, IPFamilies: []string{"ipv4", "ipv6"}}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		{name: "kube-proxy's defaults", mutate: func(*Config) {}},
		{name: "masquerade bit 31", mutate: func(c *Config) { c.MasqueradeBit = 31 }},
		{name: "masquerade bit 32", mutate: func(c *Config) { c.MasqueradeBit = 32 }, wantErr: "masquerade-bit"},
		{name: "negative masquerade bit", mutate: func(c *Config) { c.MasqueradeBit = -1 }, wantErr: "masquerade-bit"},
		{name: "primary with a CIDR", mutate: func(c *Config) { c.NodePortAddresses = []string{"primary", "10.0.0.0/8"} }, wantErr: "neither a CIDR"},
		{name: "a cluster CIDR per family", mutate: func(c *Config) { c.ClusterCIDRs = []string{"10.0.0.0/8", "fd00::/48"} }},
		{name: "two IPv4 cluster CIDRs", mutate: func(c *Config) { c.ClusterCIDRs = []string{"10.0.0.0/8", "11.0.0.0/8"} }, wantErr: "one CIDR per family"},
		{name: "bad cluster CIDR", mutate: func(c *Config) { c.ClusterCIDRs = []string{"10.0.0.0/33"} }, wantErr: "--cluster-cidr"},
		{name: "bridge mode without a bridge", mutate: func(c *Config) { c.DetectLocalMode = LocalModeBridgeInterface }, wantErr: "--pod-bridge-interface"},
		{name: "no family", mutate: func(c *Config) { c.IPFamilies = nil }, wantErr: "--ip-families"},
		{name: "unknown family", mutate: func(c *Config) { c.IPFamilies = []string{"ipv5"} }, wantErr: "--ip-families"},
		{name: "zero sync period", mutate: func(c *Config) { c.SyncPeriod = 0 }, wantErr: "--sync-period"},
		{name: "negative full sync period", mutate: func(c *Config) { c.FullSyncPeriod = -time.Second }, wantErr: "--full-sync-period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestBindFlags(t *testing.T) {
	c := valid()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.BindFlags(fs)
	err := fs.Parse([]string{"--nodeport-addresses=10.0.0.0/8,fd00::/64", "--iptables-masquerade-bit=3", "--detect-local-mode=NodeCIDR", "--masquerade-all", "--sync-period=5s"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.NodePortAddresses, []string{"10.0.0.0/8", "fd00::/64"}) || c.MasqueradeBit != 3 || c.DetectLocalMode != LocalModeNodeCIDR || !c.MasqueradeAll || c.SyncPeriod != 5*time.Second {
		t.Errorf("flags parsed into %+v", c)
	}
	if got := fs.Lookup("ip-families").DefValue; got != "[ipv4,ipv6]" {
		t.Errorf("--ip-families default shown as %s", got)
	}
}

func TestMasqueradeMark(t *testing.T) {
	for bit, want := range map[int]uint32{0: 0x1, 14: 0x4000, 31: 0x80000000} {
		if got := MasqueradeMark(bit); got != want {
			t.Errorf("MasqueradeMark(%d) = %#x, want %#x", bit, got, want)
		}
	}
}

func TestProtocolName(t *testing.T) {
	for p, want := range map[localv1.Protocol]string{localv1.Protocol_TCP: "tcp", localv1.Protocol_UDP: "udp", localv1.Protocol_SCTP: "sctp", localv1.Protocol(99): ""} {
		if got := ProtocolName(p); got != want {
			t.Errorf("ProtocolName(%v) = %q, want %q", p, got, want)
		}
	}
}
