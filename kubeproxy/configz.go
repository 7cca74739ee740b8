package kubeproxy

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpng/kpng/config"
)

// configzGroup is the key of /configz's answer, as kube-proxy's.
const configzGroup = "kubeproxy.config.k8s.io"

// configzBody is /configz's answer in kube-proxy 1.36's shape, whatever
// version the file was written in: {"kubeproxy.config.k8s.io": <the running
// configuration as v1alpha1>}. kube-proxy fills in its platform defaults
// (mode iptables, detectLocalMode ClusterCIDR, nftables' nodePortAddresses
// [primary]) before registering it, and converts from its internal type,
// which holds one sync period: the sections of the other modes show zero
// durations. So does kpng.
func configzBody(c *config.KubeProxyConfiguration) ([]byte, error) {
	c = c.DeepCopy()
	if c.Mode == "" {
		c.Mode = config.ProxyModeIPTables
	}
	if c.DetectLocalMode == "" {
		c.DetectLocalMode = config.LocalModeClusterCIDR
	}
	if c.Mode == config.ProxyModeNFTables && len(c.NodePortAddresses) == 0 {
		c.NodePortAddresses = []string{config.NodePortAddressesPrimary}
	}
	// What v1alpha1 has no field for is left out, as kube-proxy's internal
	// type has none either; the values put here only let the conversion
	// through and are overwritten or absent below.
	minSync := c.MinSyncPeriod
	c.MinSyncPeriod = time.Second
	c.ConfigHardFail, c.IPFamilyPolicy, c.IPVS.MasqueradeBit = true, "", c.IPTables.MasqueradeBit
	c.EBPF = config.Default().EBPF // kpng's own section
	if len(c.NodeIPOverride) > 1 {
		c.NodeIPOverride = c.NodeIPOverride[:1]
	}
	v1, err := config.ToV1Alpha1(c)
	if err != nil {
		return nil, err
	}
	zero := metav1.Duration{}
	v1.IPTables.SyncPeriod, v1.IPTables.MinSyncPeriod = zero, zero
	v1.IPVS.SyncPeriod, v1.IPVS.MinSyncPeriod = zero, zero
	v1.NFTables.SyncPeriod, v1.NFTables.MinSyncPeriod = zero, zero
	active := metav1.Duration{Duration: c.SyncPeriod}
	activeMin := metav1.Duration{Duration: minSync}
	switch c.Mode {
	case config.ProxyModeIPVS:
		v1.IPVS.SyncPeriod, v1.IPVS.MinSyncPeriod = active, activeMin
	case config.ProxyModeNFTables:
		v1.NFTables.SyncPeriod, v1.NFTables.MinSyncPeriod = active, activeMin
	default:
		v1.IPTables.SyncPeriod, v1.IPTables.MinSyncPeriod = active, activeMin
	}
	return json.Marshal(map[string]any{configzGroup: v1})
}
