// Package metrics holds kube-proxy's metrics, with kube-proxy's names, types,
// help texts, buckets and labels, so that dashboards and alerts written for
// kube-proxy work unchanged on kpng; the [Recorder] that feeds them from a
// backend's driver hooks; and the [Server] of /metrics, /proxyMode and
// /configz.
//
// The metrics are built with k8s.io/component-base/metrics, as kube-proxy's
// are, rather than with the bare Prometheus client: that is what gives the
// exposition the very same text ("[ALPHA] " in front of each help string),
// and a metric that is not registered costs nothing (its updates are no-ops),
// so shared code can update a metric whatever the mode.
//
// A backend needs three lines:
//
//	rec := metrics.NewRecorder(metrics.ModeNFTables) // registers the nftables set
//	opts := backend.Options{OnQueued: rec.OnQueued, OnSync: rec.OnSync}
//	go (&metrics.Server{Addr: "127.0.0.1:10249", ProxyMode: metrics.ModeNFTables}).Run(ctx)
//
// The recorder fills the sync durations (full and partial), the last and
// last-queued timestamps, the service and endpoint change counters, the
// network programming latency (from each changed entry's
// TriggerTimeUnixNano), the no-local-endpoints gauges and the mode's sync
// failure counter. Metrics only a backend can know (the iptables rule
// counts, nftables cleanup failures) are the exported variables below.
package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Proxy modes, as kube-proxy names them in /proxyMode and as [Register]
// takes them.
const (
	ModeNFTables = "nftables"
	ModeIPTables = "iptables"
	// ModeEBPF is kpng's eBPF backend (kube-proxy has no such mode): the
	// core set and the full/partial sync durations (a reset, or a resync
	// that repaired the maps, is full).
	ModeEBPF = "ebpf"
)

// IP family label values, as kube-proxy writes them (string(v1.IPFamily)).
const (
	IPv4 = "IPv4"
	IPv6 = "IPv6"
)

const subsystem = "kubeproxy"

var syncBuckets = metrics.ExponentialBuckets(0.001, 2, 15)

var (
	// SyncProxyRulesLatency is the duration of every sync, full or partial.
	SyncProxyRulesLatency = histogramVec("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", syncBuckets, "ip_family")

	// SyncFullProxyRulesLatency is the duration of full syncs.
	SyncFullProxyRulesLatency = histogramVec("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs", syncBuckets, "ip_family")

	// SyncPartialProxyRulesLatency is the duration of partial syncs.
	SyncPartialProxyRulesLatency = histogramVec("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs", syncBuckets, "ip_family")

	// SyncProxyRulesLastTimestamp is when the rules were last synced successfully.
	SyncProxyRulesLastTimestamp = gaugeVec("sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", "ip_family")

	// SyncProxyRulesLastQueuedTimestamp is when a sync was last asked for. Much
	// later than SyncProxyRulesLastTimestamp means the proxy is stuck.
	SyncProxyRulesLastQueuedTimestamp = gaugeVec("sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued", "ip_family")

	// NetworkProgrammingLatency is the time from an EndpointSlice's
	// last-change-trigger-time to the sync that programmed it (the
	// network programming latency SLI of sig-scalability).
	NetworkProgrammingLatency = histogramVec("network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds",
		metrics.MergeBuckets(
			metrics.LinearBuckets(0.25, 0.25, 2), // 0.25s, 0.50s
			metrics.LinearBuckets(1, 1, 59),      // 1s ... 59s
			metrics.LinearBuckets(60, 5, 12),     // 60s ... 115s
			metrics.LinearBuckets(120, 30, 7),    // 2min ... 5min
		), "ip_family")

	// EndpointChangesPending is the number of services whose endpoints
	// changed and are not synced yet.
	EndpointChangesPending = gauge("sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes")

	// EndpointChangesTotal counts endpoint changes seen.
	EndpointChangesTotal = counter("sync_proxy_rules_endpoint_changes_total", "Cumulative proxy rules Endpoint changes")

	// ServiceChangesPending is the number of changed services not synced yet.
	ServiceChangesPending = gauge("sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes")

	// ServiceChangesTotal counts service changes seen.
	ServiceChangesTotal = counter("sync_proxy_rules_service_changes_total", "Cumulative proxy rules Service changes")

	// SyncProxyRulesNoLocalEndpointsTotal is the number of service ports with
	// a Local policy (traffic_policy "internal" or "external") that have
	// endpoints in the cluster but none usable on this node.
	SyncProxyRulesNoLocalEndpointsTotal = gaugeVec("sync_proxy_rules_no_local_endpoints_total", "Number of services with a Local traffic policy and no endpoints", "traffic_policy", "ip_family")

	// ProxyHealthzTotal counts /healthz answers by HTTP status.
	ProxyHealthzTotal = counterVec("proxy_healthz_total", "Cumulative proxy healthz HTTP status", "code")

	// ProxyLivezTotal counts /livez answers by HTTP status.
	ProxyLivezTotal = counterVec("proxy_livez_total", "Cumulative proxy livez HTTP status", "code")

	// NFTablesSyncFailuresTotal counts failed nftables transactions.
	NFTablesSyncFailuresTotal = counterVec("sync_proxy_rules_nftables_sync_failures_total", "Cumulative proxy nftables sync failures", "ip_family")

	// NFTablesCleanupFailuresTotal counts failed removals of stale chains.
	NFTablesCleanupFailuresTotal = counterVec("sync_proxy_rules_nftables_cleanup_failures_total", "Cumulative proxy nftables cleanup failures", "ip_family")

	// IPTablesRestoreFailuresTotal counts failed iptables-restore runs.
	IPTablesRestoreFailuresTotal = counterVec("sync_proxy_rules_iptables_restore_failures_total", "Cumulative proxy iptables restore failures", "ip_family")

	// IPTablesPartialRestoreFailuresTotal counts partial restores that failed
	// (and fell back to a full restore).
	IPTablesPartialRestoreFailuresTotal = counterVec("sync_proxy_rules_iptables_partial_restore_failures_total", "Cumulative proxy iptables partial restore failures", "ip_family")

	// IPTablesRulesTotal is the number of iptables rules the proxy owns, by table.
	IPTablesRulesTotal = gaugeVec("sync_proxy_rules_iptables_total", "Total number of iptables rules owned by kube-proxy", "table", "ip_family")

	// IPTablesRulesLastSync is the number of iptables rules written by the last sync.
	IPTablesRulesLastSync = gaugeVec("sync_proxy_rules_iptables_last", "Number of iptables rules written by kube-proxy in last sync", "table", "ip_family")

	// ReconcileConntrackFlowsLatency is the duration of one stale conntrack cleanup.
	ReconcileConntrackFlowsLatency = histogramVec("conntrack_reconciler_sync_duration_seconds", "ReconcileConntrackFlowsLatency latency in seconds", syncBuckets, "ip_family")

	// ReconcileConntrackFlowsDeletedEntriesTotal counts the conntrack entries deleted as stale.
	ReconcileConntrackFlowsDeletedEntriesTotal = counterVec("conntrack_reconciler_deleted_entries_total", "Cumulative conntrack flows deleted by conntrack reconciler", "ip_family")
)

// The constructors of kube-proxy's metrics: all in its subsystem, all
// ALPHA, as kube-proxy declares them.

func counter(name, help string) *metrics.Counter {
	return metrics.NewCounter(&metrics.CounterOpts{Subsystem: subsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA})
}

func counterVec(name, help string, labels ...string) *metrics.CounterVec {
	return metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: subsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA}, labels)
}

func gauge(name, help string) *metrics.Gauge {
	return metrics.NewGauge(&metrics.GaugeOpts{Subsystem: subsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA})
}

func gaugeVec(name, help string, labels ...string) *metrics.GaugeVec {
	return metrics.NewGaugeVec(&metrics.GaugeOpts{Subsystem: subsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA}, labels)
}

func histogramVec(name, help string, buckets []float64, labels ...string) *metrics.HistogramVec {
	return metrics.NewHistogramVec(&metrics.HistogramOpts{Subsystem: subsystem, Name: name, Help: help, Buckets: buckets, StabilityLevel: metrics.ALPHA}, labels)
}

var (
	registerMu sync.Mutex
	registered = map[metrics.Registerable]bool{}
	// nfacctRegistered: the nfacct collectors (not Registerables) are.
	nfacctRegistered bool
)

var (
	coreSet = []metrics.Registerable{
		SyncProxyRulesLatency, SyncProxyRulesLastQueuedTimestamp, SyncProxyRulesLastTimestamp,
		EndpointChangesPending, EndpointChangesTotal, ServiceChangesPending, ServiceChangesTotal,
		ProxyHealthzTotal, ProxyLivezTotal, NetworkProgrammingLatency, SyncProxyRulesNoLocalEndpointsTotal,
	}
	nftablesSet = []metrics.Registerable{
		SyncFullProxyRulesLatency, SyncPartialProxyRulesLatency,
		NFTablesSyncFailuresTotal, NFTablesCleanupFailuresTotal,
		ReconcileConntrackFlowsLatency, ReconcileConntrackFlowsDeletedEntriesTotal,
	}
	ebpfSet     = []metrics.Registerable{SyncFullProxyRulesLatency, SyncPartialProxyRulesLatency}
	iptablesSet = []metrics.Registerable{
		SyncFullProxyRulesLatency, SyncPartialProxyRulesLatency,
		IPTablesRestoreFailuresTotal, IPTablesPartialRestoreFailuresTotal,
		IPTablesRulesTotal, IPTablesRulesLastSync,
		ReconcileConntrackFlowsLatency, ReconcileConntrackFlowsDeletedEntriesTotal,
	}
)

// Register registers, in the process-wide registry that [Server] serves,
// the metrics kube-proxy exposes in mode (ModeNFTables, ModeIPTables, ModeEBPF, or any
// other name for the core set only), as kube-proxy's RegisterMetrics does.
// It may be called more than once, with several modes: each metric is
// registered once.
func Register(mode string) {
	registerMu.Lock()
	defer registerMu.Unlock()
	set := coreSet
	switch mode {
	case ModeNFTables:
		set = append(set[:len(set):len(set)], nftablesSet...)
	case ModeIPTables:
		set = append(set[:len(set):len(set)], iptablesSet...)
	case ModeEBPF:
		set = append(set[:len(set):len(set)], ebpfSet...)
	}
	for _, c := range set {
		if !registered[c] {
			registered[c] = true
			legacyregistry.MustRegister(c)
		}
	}
	if mode == ModeIPTables && !nfacctRegistered {
		nfacctRegistered = true
		legacyregistry.CustomMustRegister(LocalhostNodePortsAcceptedPackets, IPTablesCTStateInvalidDroppedPackets)
	}
}
