package v1alpha1

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kpv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

func TestSetDefaultsMatchesKubeProxy(t *testing.T) {
	var got kpv1alpha1.KubeProxyConfiguration
	SetDefaults(&got)

	var logging logsapi.LoggingConfiguration
	logsapi.SetRecommendedLoggingConfiguration(&logging)
	want := kpv1alpha1.KubeProxyConfiguration{
		FeatureGates:       map[string]bool{},
		BindAddress:        "0.0.0.0",
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{
			ContentType: "application/vnd.kubernetes.protobuf", QPS: 5, Burst: 10,
		},
		Logging: logging,
		IPTables: kpv1alpha1.KubeProxyIPTablesConfiguration{
			MasqueradeBit: ptr[int32](14), LocalhostNodePorts: ptr(true),
			SyncPeriod: d(30 * time.Second), MinSyncPeriod: d(time.Second),
		},
		IPVS: kpv1alpha1.KubeProxyIPVSConfiguration{SyncPeriod: d(30 * time.Second)},
		NFTables: kpv1alpha1.KubeProxyNFTablesConfiguration{
			MasqueradeBit: ptr[int32](14), SyncPeriod: d(30 * time.Second), MinSyncPeriod: d(time.Second),
		},
		OOMScoreAdj: ptr[int32](-999),
		Conntrack: kpv1alpha1.KubeProxyConntrackConfiguration{
			MaxPerCore: ptr[int32](32768), Min: ptr[int32](131072),
			TCPEstablishedTimeout: &metav1.Duration{Duration: 24 * time.Hour},
			TCPCloseWaitTimeout:   &metav1.Duration{Duration: time.Hour},
		},
		ConfigSyncPeriod: d(15 * time.Minute),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults differ from kube-proxy v1.36 (-want +got):\n%s", diff)
	}

	again := got
	SetDefaults(&again)
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("SetDefaults is not idempotent:\n%s", diff)
	}
}

func TestSetDefaultsListenerAddresses(t *testing.T) {
	cases := []struct {
		name, bind, healthz, metrics, wantHealthz, wantMetrics string
	}{
		{name: "IPv4 bind address gives IPv4 listeners", bind: "192.0.2.1", wantHealthz: "0.0.0.0:10256", wantMetrics: "127.0.0.1:10249"},
		{name: "IPv6 bind address gives IPv6 listeners", bind: "::", wantHealthz: "[::]:10256", wantMetrics: "[::1]:10249"},
		{name: "a bare IP gets the default port", bind: "0.0.0.0", healthz: "192.0.2.1", metrics: "2001:db8::1", wantHealthz: "192.0.2.1:10256", wantMetrics: "[2001:db8::1]:10249"},
		{name: "host:port is kept", healthz: "192.0.2.1:1", metrics: "[::1]:2", wantHealthz: "192.0.2.1:1", wantMetrics: "[::1]:2"},
		{name: "garbage is left for validation", healthz: "nonsense", metrics: "x", wantHealthz: "nonsense", wantMetrics: "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kpv1alpha1.KubeProxyConfiguration{BindAddress: tc.bind, HealthzBindAddress: tc.healthz, MetricsBindAddress: tc.metrics}
			SetDefaults(&c)
			if c.HealthzBindAddress != tc.wantHealthz || c.MetricsBindAddress != tc.wantMetrics {
				t.Errorf("got %q, %q; want %q, %q", c.HealthzBindAddress, c.MetricsBindAddress, tc.wantHealthz, tc.wantMetrics)
			}
		})
	}
}

func TestSetDefaultsKeepsExplicitValues(t *testing.T) {
	c := kpv1alpha1.KubeProxyConfiguration{
		IPTables:  kpv1alpha1.KubeProxyIPTablesConfiguration{LocalhostNodePorts: ptr(false), MasqueradeBit: ptr[int32](0)},
		Conntrack: kpv1alpha1.KubeProxyConntrackConfiguration{MaxPerCore: ptr[int32](0), TCPEstablishedTimeout: &metav1.Duration{}},
	}
	SetDefaults(&c)
	if *c.IPTables.LocalhostNodePorts || *c.IPTables.MasqueradeBit != 0 || *c.Conntrack.MaxPerCore != 0 || c.Conntrack.TCPEstablishedTimeout.Duration != 0 {
		t.Errorf("explicit zero values were overwritten: %+v %+v", c.IPTables, c.Conntrack)
	}
	// Like kube-proxy, a zero duration counts as unset where it is a value.
	if c.IPTables.MinSyncPeriod.Duration != time.Second || c.IPVS.MinSyncPeriod.Duration != 0 {
		t.Errorf("minSyncPeriod defaults: iptables %v, ipvs %v", c.IPTables.MinSyncPeriod, c.IPVS.MinSyncPeriod)
	}
}

func d(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
