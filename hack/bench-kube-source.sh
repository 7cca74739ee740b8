#!/usr/bin/env bash
# bench-kube-source.sh measures kpng's Kubernetes API source at startup: a
# real etcd and kube-apiserver (test/integration/apiserver) are preloaded
# with N Services of 10 endpoints each (one EndpointSlice per Service), then
# the real binary runs
#
#   kpng kube --kubeconfig F [--kube-api-content-type T] to-file --node-name node-1 --output F2 --format json
#
# which exits after writing its first complete view. For each N and content
# type it prints the mean wall time from process start to exit, the peak RSS
# (getrusage of the process), and the store's events in and revisions out
# at sync (one of each per object, plus the sync itself).
#
# Usage: hack/bench-kube-source.sh [SIZES [RUNS]]   e.g. hack/bench-kube-source.sh 1000,10000 3
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
sizes="${1:-1000,10000}"
runs="${2:-3}"

hack/install-test-deps.sh >&2

out="$(mktemp)"
trap 'rm -f "${out}"' EXIT
KPNG_BENCH_SERVICES="${sizes}" go test -tags integration -run '^$' -bench '^BenchmarkKubeStartup$' \
	-benchtime "${runs}x" -timeout 60m ./test/integration/kube/ | tee "${out}" >&2

printf '\nkpng kube: start to first complete view (%s runs each; %s, %s cores, load average %s)\n\n' \
	"${runs}" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
awk '
BEGIN {
	printf "| Services | Endpoints | Content type | First view (s) | Peak RSS (MB) | Events in | Revisions out |\n"
	printf "|---:|---:|---|---:|---:|---:|---:|\n"
}
/^BenchmarkKubeStartup\// {
	split($1, p, "/"); n = p[2]; sub("services=", "", n); ct = p[3]; sub(/-[0-9]+$/, "", ct)
	for (i = 3; i < NF; i += 2) m[$(i+1)] = $i
	printf "| %d | %d | %s | %.2f | %.0f | %d | %d |\n", n, n * 10, ct, m["s/first-view"], m["MB-peak-RSS"], m["events"], m["revisions"]
}' "${out}"
