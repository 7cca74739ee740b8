// Package faults is kpng's fault suite: real kube-apiserver and etcd, real
// packets in network namespaces (test/e2e/netlab), constant probe traffic
// (ClusterIP TCP and UDP from a pod, a NodePort, a LoadBalancer IP and a
// local-policy NodePort from outside the cluster), and one fault at a time:
// the proxy restarted (gracefully and with SIGKILL), the API server killed
// and brought back, endpoint churn, Services created and deleted in bulk,
// rules damaged by hand, transactions the kernel refuses (the proxy's IPv6
// table replaced by an nf_tables owner table of another process), and, when the
// brain serves agents over gRPC, brain and agent restarts and misbehaving
// gRPC peers. Each fault is a row of one table: probes sent, probes failed,
// and what the fault's pass condition measures.
//
// kpng's ebpf backend runs in labs with a cgroup v2 per node (its socket
// programs attach to the node's cgroup, never the machine's root), and has
// no rules to damage: its faults by hand are its pinned services map
// emptied, one frontend deleted, one backend slot deleted, and the pins
// of two of its links removed (which detaches them), each to be repaired
// by the running proxy at the first periodic sync after it; the kernel
// refusing its writes is its slots map filled to max_entries
// (ebpf_test.go).
//
// # Running
//
// As root, with the e2e build tag:
//
//	go test -tags e2e ./test/e2e/faults/
//
// runs the fast subset that CI runs: short faults, for kpng's nft and ebpf
// backends in one process and its iptables backend behind a brain.
// hack/faults.sh runs the full set (the durations, every form of
// every backend, and upstream kube-proxy through the same cases) and writes
// docs/reliability.md. Environment:
//
//	KPNG_FAULTS_VARIANTS  comma-separated: nft, iptables, ebpf,
//	                      nft-split, iptables-split, ebpf-split,
//	                      kube-proxy-nftables, kube-proxy-iptables
//	KPNG_FAULTS_FULL=1    the durations (60 s of churn, a 30 s
//	                      API-server outage, ...), and a repair judged
//	                      by the 1 s target (without it, a repair must be
//	                      asked for by kpng's watch of the kernel, and
//	                      its time over 1 s on a loaded machine is
//	                      reported, not failed: a speed target)
//	KPNG_FAULTS_MARKDOWN  write the table there, as docs/reliability.md
//	KPNG_FAULTS_DEBUG=1   log node-1's proxy output of each fault
//
// A probe (netlab.Host.Probe) is judged by what the kernel recorded, not
// by the test process's clock, which stands still for seconds on an
// overloaded machine: it fails when it is refused or answered wrongly,
// when no answer comes within five seconds (a dropped datagram, a SYN
// dropped on every try), or when the answer came only after the kernel
// sent a handshake packet again (a SYN or SYN-ACK dropped once). The test
// process's longest stall is logged beside a fault's failures.
//
// A variant's pass conditions are asserted for kpng; kube-proxy's rows are
// measured and reported, as the reference.
package faults
