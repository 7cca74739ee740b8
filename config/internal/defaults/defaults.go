// Package defaults holds the default values that kube-proxy v1.36 applies to
// its component configuration, shared by kpng's v1alpha1 and v1alpha2
// defaulting so the two versions cannot drift apart by accident.
package defaults

import (
	"net"
	"strconv"
	"time"

	netutils "k8s.io/utils/net"
)

// Default values, as in kube-proxy v1.36 (pkg/proxy/apis/config/v1alpha1).
const (
	// HealthzPort is kube-proxy's health check port (ports.ProxyHealthzPort).
	HealthzPort = 10256
	// MetricsPort is kube-proxy's metrics port (ports.ProxyStatusPort).
	MetricsPort = 10249
	// OOMScoreAdj is kube-proxy's oom_score_adj (qos.KubeProxyOOMScoreAdj).
	OOMScoreAdj int32 = -999
	// SyncPeriod is the default full resync interval of every backend.
	SyncPeriod = 30 * time.Second
	// MinSyncPeriod is the default minimum interval between iptables and
	// nftables resyncs. (kube-proxy leaves ipvs.minSyncPeriod at 0.)
	MinSyncPeriod = 1 * time.Second
	// ConfigSyncPeriod is how often informers resync.
	ConfigSyncPeriod = 15 * time.Minute
	// MasqueradeBit is the fwmark bit used for SNAT.
	MasqueradeBit int32 = 14
	// ConntrackMaxPerCore is the default conntrack.maxPerCore.
	ConntrackMaxPerCore int32 = 32 * 1024
	// ConntrackMin is the default conntrack.min.
	ConntrackMin int32 = 128 * 1024
	// ConntrackTCPEstablishedTimeout is one day (1/5 of the kernel default).
	ConntrackTCPEstablishedTimeout = 24 * time.Hour
	// ConntrackTCPCloseWaitTimeout is one hour, to match typical server
	// timeouts (kubernetes/kubernetes#32551).
	ConntrackTCPCloseWaitTimeout = 1 * time.Hour
	// ContentType is the default API content type.
	ContentType = "application/vnd.kubernetes.protobuf"
	// QPS is the default client QPS.
	QPS float32 = 5.0
	// Burst is the default client burst.
	Burst int32 = 10
)

// Addresses returns the default health check and metrics addresses
// ("IP:port"): all-interfaces and loopback of IPv6 when ipv6 is true, of IPv4
// otherwise. Callers decide the family from their node IP setting.
func Addresses(ipv6 bool) (healthz, metrics string) {
	if ipv6 {
		return net.JoinHostPort("::", strconv.Itoa(HealthzPort)), net.JoinHostPort("::1", strconv.Itoa(MetricsPort))
	}
	return net.JoinHostPort("0.0.0.0", strconv.Itoa(HealthzPort)), net.JoinHostPort("127.0.0.1", strconv.Itoa(MetricsPort))
}

// AppendPortIfNeeded appends port to addr when addr is a bare IP address,
// as kube-proxy does for healthzBindAddress and metricsBindAddress. Anything
// else (already host:port, or not an IP) is returned unchanged and left to
// validation.
func AppendPortIfNeeded(addr string, port int) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	ip := netutils.ParseIPSloppy(addr)
	if ip == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}
