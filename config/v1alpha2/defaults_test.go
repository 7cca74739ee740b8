package v1alpha2

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	logsapi "k8s.io/component-base/logs/api/v1"
)

func TestSetDefaults(t *testing.T) {
	var got KubeProxyConfiguration
	SetDefaults(&got)

	var logging logsapi.LoggingConfiguration
	logsapi.SetRecommendedLoggingConfiguration(&logging)
	want := KubeProxyConfiguration{
		Linux: KubeProxyLinuxConfiguration{
			Conntrack: KubeProxyConntrackConfiguration{
				MaxPerCore: ptr[int32](32768), Min: ptr[int32](131072),
				TCPEstablishedTimeout: &metav1.Duration{Duration: 24 * time.Hour},
				TCPCloseWaitTimeout:   &metav1.Duration{Duration: time.Hour},
			},
			OOMScoreAdj: ptr[int32](-999),
		},
		FeatureGates: map[string]bool{},
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{
			ContentType: "application/vnd.kubernetes.protobuf", QPS: 5, Burst: 10,
		},
		Logging:            logging,
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		// KEP-784's new defaults.
		BindAddressHardFail: ptr(true),
		ConfigHardFail:      ptr(true),
		IPTables:            KubeProxyIPTablesConfiguration{MasqueradeBit: ptr[int32](14), LocalhostNodePorts: ptr(false)},
		IPVS:                KubeProxyIPVSConfiguration{MasqueradeBit: ptr[int32](14)},
		NFTables:            KubeProxyNFTablesConfiguration{MasqueradeBit: ptr[int32](14)},
		// kpng's own section.
		EBPF:             KubeProxyEBPFConfiguration{Interfaces: []string{"auto"}, PinPath: "/sys/fs/bpf/kpng"},
		SyncPeriod:       metav1.Duration{Duration: 30 * time.Second},
		MinSyncPeriod:    &metav1.Duration{Duration: time.Second},
		ConfigSyncPeriod: metav1.Duration{Duration: 15 * time.Minute},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("v1alpha2 defaults (-want +got):\n%s", diff)
	}
	again := got
	SetDefaults(&again)
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("SetDefaults is not idempotent:\n%s", diff)
	}
}

func TestSetDefaultsFollowsNodeIPFamily(t *testing.T) {
	cases := []struct {
		name                 string
		nodeIPs              []string
		wantHealthz, wantMet string
	}{
		{name: "no override gives IPv4 listeners", wantHealthz: "0.0.0.0:10256", wantMet: "127.0.0.1:10249"},
		{name: "IPv4 primary gives IPv4 listeners", nodeIPs: []string{"192.0.2.1", "2001:db8::1"}, wantHealthz: "0.0.0.0:10256", wantMet: "127.0.0.1:10249"},
		{name: "IPv6 primary gives IPv6 listeners", nodeIPs: []string{"2001:db8::1"}, wantHealthz: "[::]:10256", wantMet: "[::1]:10249"},
		{name: "an unparsable override gives IPv4 listeners and is left to validation", nodeIPs: []string{"x"}, wantHealthz: "0.0.0.0:10256", wantMet: "127.0.0.1:10249"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := KubeProxyConfiguration{NodeIPOverride: tc.nodeIPs}
			SetDefaults(&c)
			if c.HealthzBindAddress != tc.wantHealthz || c.MetricsBindAddress != tc.wantMet {
				t.Errorf("got %q, %q", c.HealthzBindAddress, c.MetricsBindAddress)
			}
		})
	}
}

func TestSetDefaultsKeepsExplicitZeroes(t *testing.T) {
	c := KubeProxyConfiguration{
		MinSyncPeriod:       &metav1.Duration{},
		BindAddressHardFail: ptr(false),
		ConfigHardFail:      ptr(false),
		IPVS:                KubeProxyIPVSConfiguration{MasqueradeBit: ptr[int32](0)},
		EBPF:                KubeProxyEBPFConfiguration{Interfaces: []string{}},
	}
	SetDefaults(&c)
	if c.MinSyncPeriod.Duration != 0 || *c.BindAddressHardFail || *c.ConfigHardFail || *c.IPVS.MasqueradeBit != 0 || c.EBPF.Interfaces == nil || len(c.EBPF.Interfaces) != 0 {
		t.Errorf("explicit values were overwritten: %+v", c)
	}
}
