package metrics

import (
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/proxyutil/nfacct"
)

// The metrics kube-proxy's iptables mode reads from the kernel's nfacct
// counters, which its rules (and the iptables backend's) count into.
var (
	LocalhostNodePortsAcceptedPackets = newNFAcctCollector(nfacct.LocalhostNodePortsAccepted, metrics.NewDesc(
		"kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
		"Number of packets accepted on nodeports of loopback interface",
		nil, nil, metrics.ALPHA, ""))
	IPTablesCTStateInvalidDroppedPackets = newNFAcctCollector(nfacct.InvalidDropped, metrics.NewDesc(
		"kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
		"packets dropped by iptables to work around conntrack problems",
		nil, nil, metrics.ALPHA, ""))
)

// nfacctCollector reports one counter's packets at each scrape. A counter
// that cannot be read (not made yet, no nfnetlink_acct) reports nothing,
// as kube-proxy's collector does.
type nfacctCollector struct {
	metrics.BaseStableCollector
	counter string
	desc    *metrics.Desc
	read    func(counter string) (uint64, error)
}

func newNFAcctCollector(counter string, desc *metrics.Desc) *nfacctCollector {
	return &nfacctCollector{counter: counter, desc: desc, read: readNFAcct}
}

func readNFAcct(counter string) (uint64, error) {
	c, err := nfacct.Open()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctr, err := c.Get(counter)
	return ctr.Packets, err
}

// DescribeWithStability implements metrics.StableCollector.
func (c *nfacctCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

// CollectWithStability implements metrics.StableCollector.
func (c *nfacctCollector) CollectWithStability(ch chan<- metrics.Metric) {
	packets, err := c.read(c.counter)
	if err != nil {
		klog.V(2).InfoS("Not reporting an nfacct counter", "counter", c.counter, "err", err)
		return
	}
	ch <- metrics.NewLazyConstMetric(c.desc, metrics.CounterValue, float64(packets))
}
