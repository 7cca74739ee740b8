// Package v1alpha1 defaults kube-proxy's own kubeproxy.config.k8s.io/v1alpha1
// KubeProxyConfiguration (the Go types of the staging module
// k8s.io/kube-proxy/config/v1alpha1) exactly as kube-proxy v1.36 does, without
// depending on the Kubernetes monorepo.
package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kpv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	netutils "k8s.io/utils/net"

	"github.com/kpng/kpng/config/internal/defaults"
)

// GroupName is the API group of the kube-proxy component configuration.
const GroupName = "kubeproxy.config.k8s.io"

// Version is this package's API version.
const Version = "v1alpha1"

// APIVersion is the apiVersion value a v1alpha1 document carries.
const APIVersion = GroupName + "/" + Version

// Kind is the kind of the component configuration object.
const Kind = "KubeProxyConfiguration"

// DefaultBindAddress is the bindAddress kube-proxy assumes when none is set.
const DefaultBindAddress = "0.0.0.0"

// SetDefaults fills every unset field of obj with kube-proxy v1.36's v1alpha1
// default. Like kube-proxy, a zero duration counts as unset, so for example
// iptables.minSyncPeriod: 0s becomes 1s (ipvs.minSyncPeriod has no default and
// keeps 0). SetDefaults is idempotent.
func SetDefaults(obj *kpv1alpha1.KubeProxyConfiguration) {
	if obj.BindAddress == "" {
		obj.BindAddress = DefaultBindAddress
	}
	// kube-proxy picks IPv6 listeners unless bindAddress is an IPv4 address.
	healthz, metrics := defaults.Addresses(netutils.ParseIPSloppy(obj.BindAddress).To4() == nil)
	if obj.HealthzBindAddress == "" {
		obj.HealthzBindAddress = healthz
	} else {
		obj.HealthzBindAddress = defaults.AppendPortIfNeeded(obj.HealthzBindAddress, defaults.HealthzPort)
	}
	if obj.MetricsBindAddress == "" {
		obj.MetricsBindAddress = metrics
	} else {
		obj.MetricsBindAddress = defaults.AppendPortIfNeeded(obj.MetricsBindAddress, defaults.MetricsPort)
	}

	if obj.OOMScoreAdj == nil {
		obj.OOMScoreAdj = ptr(defaults.OOMScoreAdj)
	}
	setDuration(&obj.IPTables.SyncPeriod, defaults.SyncPeriod)
	setDuration(&obj.IPTables.MinSyncPeriod, defaults.MinSyncPeriod)
	if obj.IPTables.LocalhostNodePorts == nil {
		obj.IPTables.LocalhostNodePorts = ptr(true)
	}
	setDuration(&obj.IPVS.SyncPeriod, defaults.SyncPeriod)
	setDuration(&obj.NFTables.SyncPeriod, defaults.SyncPeriod)
	setDuration(&obj.NFTables.MinSyncPeriod, defaults.MinSyncPeriod)

	if obj.Conntrack.MaxPerCore == nil {
		obj.Conntrack.MaxPerCore = ptr(defaults.ConntrackMaxPerCore)
	}
	if obj.Conntrack.Min == nil {
		obj.Conntrack.Min = ptr(defaults.ConntrackMin)
	}
	if obj.IPTables.MasqueradeBit == nil {
		obj.IPTables.MasqueradeBit = ptr(defaults.MasqueradeBit)
	}
	if obj.NFTables.MasqueradeBit == nil {
		obj.NFTables.MasqueradeBit = ptr(defaults.MasqueradeBit)
	}
	if obj.Conntrack.TCPEstablishedTimeout == nil {
		obj.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: defaults.ConntrackTCPEstablishedTimeout}
	}
	if obj.Conntrack.TCPCloseWaitTimeout == nil {
		obj.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: defaults.ConntrackTCPCloseWaitTimeout}
	}
	setDuration(&obj.ConfigSyncPeriod, defaults.ConfigSyncPeriod)

	if obj.ClientConnection.ContentType == "" {
		obj.ClientConnection.ContentType = defaults.ContentType
	}
	if obj.ClientConnection.QPS == 0 {
		obj.ClientConnection.QPS = defaults.QPS
	}
	if obj.ClientConnection.Burst == 0 {
		obj.ClientConnection.Burst = defaults.Burst
	}
	if obj.FeatureGates == nil {
		obj.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&obj.Logging)
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func ptr[T any](v T) *T { return &v }
