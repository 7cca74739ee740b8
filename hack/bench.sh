#!/usr/bin/env bash
# bench.sh runs kpng and upstream kube-proxy side by side against one real
# API server and writes BENCHMARKS.md and its plots (docs/bench/*.png).
# As root, on a Debian machine with Go:
#
#   hack/bench.sh                          # 100, 1,000, 5,000 and 10,000 services x 10 endpoints, then
#                                          # 30,000 if the machine allows (see --with-30k), then the
#                                          # fan-out: one kpng brain to 1,000 agents at 10,000 services
#   hack/bench.sh --sizes 100,10000        # other sizes (30,000 only if listed or --with-30k)
#   hack/bench.sh --with-30k               # 30,000 services whatever the rule says (long); =false: never
#   hack/bench.sh --fanout-agents 0        # no fan-out; --fanout-services N, --fanout-changes N size it
#   hack/bench.sh --report-only            # redo BENCHMARKS.md from .cache/bench/results-*.json and fanout.json
#   hack/bench.sh --help                   # every flag
#   hack/bench.sh --ebpf-only --sizes 100,1000,10000,30000
#                                          # kpng-ebpf alone: issue 21's figures (connect to a
#                                          # ClusterIP vs the pod IP, one endpoint change, maps'
#                                          # memory); writes only BENCHMARKS.md's kpng-ebpf section
#
# It installs the test dependencies first (etcd, nftables, iptables,
# kube-apiserver and kube-proxy built into .cache/bin), builds kpng from the
# last commit (and hack/bench-fanout), and runs hack/bench (its own Go
# module, so that the plotting library never enters kpng's go.mod). Results
# and every process's log go to .cache/bench. See hack/bench/main.go for
# what is measured, and BENCHMARKS.md for how to read it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

# Neither the report nor the help needs root or the test dependencies.
setup=1
for arg in "$@"; do
	case "${arg}" in
	--report-only | -h | -help | --help) setup=0 ;;
	esac
done
if [[ ${setup} -eq 1 ]]; then
	if [[ $(id -u) -ne 0 ]]; then
		echo "bench.sh: the bench creates network namespaces and needs root; run as root (e.g. sudo)" >&2
		exit 1
	fi
	hack/install-test-deps.sh >&2
fi

go -C hack/bench build -o "${root}/.cache/bench/bench" .
exec "${root}/.cache/bench/bench" "$@"
