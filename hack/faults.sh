#!/usr/bin/env bash
# faults.sh runs the whole fault suite (test/e2e/faults) and writes
# docs/reliability.md from what it measured: every fault at the issue's
# durations (60 s of endpoint churn, Services created and deleted at 20/s
# for 60 s, a 30 s API-server outage, ...), for kpng's nft, iptables and
# ebpf backends in one process and behind a brain serving node agents over
# gRPC (ebpf in labs with a cgroup v2 per node),
# and for upstream kube-proxy (nftables and iptables modes, built from the
# pinned module by hack/install-test-deps.sh) through the same cases with
# the same harness, side by side. As root:
#
#   hack/faults.sh                 # writes docs/reliability.md
#   hack/faults.sh -o /tmp/r.md    # writes elsewhere
#
# KPNG_FAULTS_VARIANTS narrows the variants (see test/e2e/faults/doc.go).
# CI runs a fast subset of the same suite as part of hack/test.sh.
# The table is written even when a fault fails its pass condition; the
# script then exits non-zero.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

out=docs/reliability.md
while [[ $# -gt 0 ]]; do
	case $1 in
	-o) out=$2; shift 2 ;;
	*) echo "usage: hack/faults.sh [-o FILE]" >&2; exit 2 ;;
	esac
done
if [[ $(id -u) -ne 0 ]]; then
	echo "faults.sh: the suite creates network namespaces and needs root" >&2
	exit 1
fi
if [[ ! -x .cache/bin/kube-apiserver || ! -x .cache/bin/kube-proxy ]] && [[ -z ${KPNG_KUBE_PROXY:-} ]]; then
	echo "faults.sh: no kube-apiserver or kube-proxy in .cache/bin: run hack/install-test-deps.sh first" >&2
	exit 1
fi

tmp=$(mktemp)
trap 'rm -f "${tmp}"' EXIT
status=0
KPNG_FAULTS_FULL=1 \
	KPNG_FAULTS_VARIANTS=${KPNG_FAULTS_VARIANTS:-nft,nft-split,iptables,iptables-split,ebpf,ebpf-split,kube-proxy-nftables,kube-proxy-iptables} \
	KPNG_FAULTS_MARKDOWN="${tmp}" \
	KPNG_FAULTS_COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" \
	go test -tags e2e -count=1 -run '^TestFaults$' -v -timeout 3h ./test/e2e/faults/ || status=$?
if [[ ! -s ${tmp} ]]; then
	echo "faults.sh: the suite wrote no table (status ${status})" >&2
	exit 1
fi
cp "${tmp}" "${out}"
echo "faults.sh: wrote ${out} (suite status ${status})"
exit "${status}"
