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
	SyncProxyRulesLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_duration_seconds",
		Help: "SyncProxyRules latency in seconds", Buckets: syncBuckets, StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// SyncFullProxyRulesLatency is the duration of full syncs.
	SyncFullProxyRulesLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: subsystem, Name: "sync_full_proxy_rules_duration_seconds",
		Help: "SyncProxyRules latency in seconds for full resyncs", Buckets: syncBuckets, StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// SyncPartialProxyRulesLatency is the duration of partial syncs.
	SyncPartialProxyRulesLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: subsystem, Name: "sync_partial_proxy_rules_duration_seconds",
		Help: "SyncProxyRules latency in seconds for partial resyncs", Buckets: syncBuckets, StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// SyncProxyRulesLastTimestamp is when the rules were last synced successfully.
	SyncProxyRulesLastTimestamp = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_last_timestamp_seconds",
		Help: "The last time proxy rules were successfully synced", StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// SyncProxyRulesLastQueuedTimestamp is when a sync was last asked for. Much
	// later than SyncProxyRulesLastTimestamp means the proxy is stuck.
	SyncProxyRulesLastQueuedTimestamp = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_last_queued_timestamp_seconds",
		Help: "The last time a sync of proxy rules was queued", StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// NetworkProgrammingLatency is the time from an EndpointSlice's
	// last-change-trigger-time to the sync that programmed it (the
	// network programming latency SLI of sig-scalability).
	NetworkProgrammingLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: subsystem, Name: "network_programming_duration_seconds",
		Help: "In Cluster Network Programming Latency in seconds",
		Buckets: metrics.MergeBuckets(
			metrics.LinearBuckets(0.25, 0.25, 2), // 0.25s, 0.50s
			metrics.LinearBuckets(1, 1, 59),      // 1s ... 59s
			metrics.LinearBuckets(60, 5, 12),     // 60s ... 115s
			metrics.LinearBuckets(120, 30, 7),    // 2min ... 5min
		),
		StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// EndpointChangesPending is the number of services whose endpoints
	// changed and are not synced yet.
	EndpointChangesPending = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_endpoint_changes_pending",
		Help: "Pending proxy rules Endpoint changes", StabilityLevel: metrics.ALPHA,
	})

	// EndpointChangesTotal counts endpoint changes seen.
	EndpointChangesTotal = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_endpoint_changes_total",
		Help: "Cumulative proxy rules Endpoint changes", StabilityLevel: metrics.ALPHA,
	})

	// ServiceChangesPending is the number of changed services not synced yet.
	ServiceChangesPending = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_service_changes_pending",
		Help: "Pending proxy rules Service changes", StabilityLevel: metrics.ALPHA,
	})

	// ServiceChangesTotal counts service changes seen.
	ServiceChangesTotal = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_service_changes_total",
		Help: "Cumulative proxy rules Service changes", StabilityLevel: metrics.ALPHA,
	})

	// SyncProxyRulesNoLocalEndpointsTotal is the number of service ports with
	// a Local policy (traffic_policy "internal" or "external") that have
	// endpoints in the cluster but none usable on this node.
	SyncProxyRulesNoLocalEndpointsTotal = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_no_local_endpoints_total",
		Help: "Number of services with a Local traffic policy and no endpoints", StabilityLevel: metrics.ALPHA,
	}, []string{"traffic_policy", "ip_family"})

	// ProxyHealthzTotal counts /healthz answers by HTTP status.
	ProxyHealthzTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "proxy_healthz_total",
		Help: "Cumulative proxy healthz HTTP status", StabilityLevel: metrics.ALPHA,
	}, []string{"code"})

	// ProxyLivezTotal counts /livez answers by HTTP status.
	ProxyLivezTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "proxy_livez_total",
		Help: "Cumulative proxy livez HTTP status", StabilityLevel: metrics.ALPHA,
	}, []string{"code"})

	// NFTablesSyncFailuresTotal counts failed nftables transactions.
	NFTablesSyncFailuresTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_nftables_sync_failures_total",
		Help: "Cumulative proxy nftables sync failures", StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// NFTablesCleanupFailuresTotal counts failed removals of stale chains.
	NFTablesCleanupFailuresTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_nftables_cleanup_failures_total",
		Help: "Cumulative proxy nftables cleanup failures", StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// IPTablesRestoreFailuresTotal counts failed iptables-restore runs.
	IPTablesRestoreFailuresTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_iptables_restore_failures_total",
		Help: "Cumulative proxy iptables restore failures", StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// IPTablesPartialRestoreFailuresTotal counts partial restores that failed
	// (and fell back to a full restore).
	IPTablesPartialRestoreFailuresTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_iptables_partial_restore_failures_total",
		Help: "Cumulative proxy iptables partial restore failures", StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// IPTablesRulesTotal is the number of iptables rules the proxy owns, by table.
	IPTablesRulesTotal = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_iptables_total",
		Help: "Total number of iptables rules owned by kube-proxy", StabilityLevel: metrics.ALPHA,
	}, []string{"table", "ip_family"})

	// IPTablesRulesLastSync is the number of iptables rules written by the last sync.
	IPTablesRulesLastSync = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: subsystem, Name: "sync_proxy_rules_iptables_last",
		Help: "Number of iptables rules written by kube-proxy in last sync", StabilityLevel: metrics.ALPHA,
	}, []string{"table", "ip_family"})

	// ReconcileConntrackFlowsLatency is the duration of one stale conntrack cleanup.
	ReconcileConntrackFlowsLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: subsystem, Name: "conntrack_reconciler_sync_duration_seconds",
		Help: "ReconcileConntrackFlowsLatency latency in seconds", Buckets: syncBuckets, StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})

	// ReconcileConntrackFlowsDeletedEntriesTotal counts the conntrack entries deleted as stale.
	ReconcileConntrackFlowsDeletedEntriesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: subsystem, Name: "conntrack_reconciler_deleted_entries_total",
		Help: "Cumulative conntrack flows deleted by conntrack reconciler", StabilityLevel: metrics.ALPHA,
	}, []string{"ip_family"})
)

var (
	registerMu sync.Mutex
	registered = map[metrics.Registerable]bool{}
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
	iptablesSet = []metrics.Registerable{
		SyncFullProxyRulesLatency, SyncPartialProxyRulesLatency,
		IPTablesRestoreFailuresTotal, IPTablesPartialRestoreFailuresTotal,
		IPTablesRulesTotal, IPTablesRulesLastSync,
		ReconcileConntrackFlowsLatency, ReconcileConntrackFlowsDeletedEntriesTotal,
	}
)

// Register registers, in the process-wide registry that [Server] serves,
// the metrics kube-proxy exposes in mode (ModeNFTables, ModeIPTables, or any
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
	}
	for _, c := range set {
		if !registered[c] {
			registered[c] = true
			legacyregistry.MustRegister(c)
		}
	}
}
