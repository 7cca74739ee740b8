#!/usr/bin/env bash
# test.sh is kpng's whole test suite, as CI runs it (.ci/run) and as the
# README tells you to run it. On a fresh Debian machine with Go, as root:
#
#   1. installs what the tests run against (hack/install-test-deps.sh:
#      etcd, nftables, iptables, conntrack, kube-apiserver built and cached);
#   2. checks gofmt and go vet (with every build tag), and that the
#      committed BPF objects of backends/ebpf match their C sources;
#   3. runs every test once, with the race detector: unit tests, tests
#      against the real API server (build tag "integration") and real-packet
#      tests in network namespaces (build tag "e2e", needs root); the ipvs
#      backend's kernel tests need IPVS, which the host kernel may lack:
#      their TestMain then runs them in hack/vm.sh's VM (Debian 12's
#      kernel, docs/vm.md), so they run everywhere, never skip; the shared
#      real-packet suite (test/e2e/services) then runs for ipvs in the VM;
#   4. starts two kubelet nodes with kpng as their DaemonSet (nft, iptables,
#      and split into brain and agents) and checks that pods reach Services
#      through it (hack/e2e-node.sh --smoke).
#
# Extra arguments go to go test, e.g. hack/test.sh -run TestClusterIP.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
log() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%T)"; }

if [[ $(id -u) -ne 0 ]]; then
	echo "test.sh: the e2e tests create network namespaces and need root; run as root (e.g. sudo)" >&2
	exit 1
fi

log "installing test dependencies"
hack/install-test-deps.sh

tags=integration,e2e
# Every test runs every time (-count=1): go's test cache keys a result on
# the Go inputs, not on the kernel, the binaries in .cache/bin or the API
# server the tests start, so a cached "ok" of a real-packet test is not a
# run. (A loop of this script would otherwise rerun only what changed.)
count=-count=1

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [[ -n ${unformatted} ]]; then
	echo "not gofmt-formatted:" >&2
	echo "${unformatted}" >&2
	exit 1
fi

log "go vet"
go vet -tags "${tags}" ./...
# hack/bench is its own module (its plotting library stays out of kpng's
# go.mod), so ./... does not reach it: vet and test it on its own.
go -C hack/bench vet ./...
# hack/kubeproxyref imports k8s.io/kubernetes (kube-proxy's flags, kubeadm's
# ConfigMap), which kpng's go.mod must not: its own module too.
go -C hack/kubeproxyref vet ./...
# hack/image and hack/manifests keep go-containerregistry and kustomize out
# of kpng's go.mod.
go -C hack/image vet ./...
go -C hack/manifests vet ./...
# hack/difftest imports kube-proxy's pkg/proxy; its mutation build too.
go -C hack/difftest vet ./...
go -C hack/difftest vet -tags kpngmutation ./...

log "BPF objects (backends/ebpf's committed objects are what its C sources compile to)"
hack/verify-ebpf.sh

# The shared real-packet suite (test/e2e/services) runs every backend of
# cmd/kpng on the host's kernel. One without IPVS cannot run to-ipvs: the
# suite then runs the others, and the ipvs backend's own kernel tests run
# in hack/vm.sh's VM (their TestMain, above).
if [[ -z ${KPNG_E2E_BACKENDS:-} ]] && ! { modprobe -q ip_vs 2>/dev/null; [[ -e /proc/net/ip_vs ]]; }; then
	e2e_backends=()
	for f in cmd/kpng/register_*.go; do
		name="${f#cmd/kpng/register_}" && name="${name%.go}"
		[[ ${name} == ipvs ]] || e2e_backends+=("${name}")
	done
	export KPNG_E2E_BACKENDS="$(IFS=,; echo "${e2e_backends[*]}")"
	echo "no IPVS in this kernel: test/e2e/services runs ${KPNG_E2E_BACKENDS}; backends/ipvs's kernel tests, and test/e2e/services for ipvs, run in hack/vm.sh's VM"
	services_ipvs_in_vm=1
fi

log "go test (unit, integration, e2e; race detector on)"
go test ${count} -race -tags "${tags}" -timeout 60m "$@" ./...

# The shared real-packet suite for to-ipvs, which the run above left out
# (no IPVS in this kernel): in hack/vm.sh's VM, booting Debian 12's kernel
# (docs/ipvs.md, "How it is tested"). Every test of test/e2e/services that
# runs per backend, TestRepair included (IPVS, kube-ipvs0, the ipsets and
# the rules damaged, repaired by the periodic sync: docs/ipvs.md);
# TestMigration (kube-proxy's nftables and iptables modes) and
# TestDifferencesDocumented ran above. Without the race
# detector, which the emulated VM could not afford; kpng is built on the
# host from this tree (netlab.KpngBinaryEnv). A focused run (arguments
# given) leaves it out.
if [[ -n ${services_ipvs_in_vm:-} ]] && (($# == 0)); then
	log "test/e2e/services for ipvs in hack/vm.sh's VM (real packets through IPVS; Debian 12's kernel under emulation)"
	services_test="${root}/.cache/vm/services-e2e.test"
	mkdir -p "$(dirname "${services_test}")"
	go test -c -tags e2e -o "${services_test}" ./test/e2e/services
	# kpng too, on the host: linking it in the emulated VM took minutes.
	go build -o "${root}/.cache/vm/kpng" ./cmd/kpng
	(cd test/e2e/services && KPNG_E2E_BACKENDS=ipvs KPNG_NETLAB_KPNG="${root}/.cache/vm/kpng" \
		VM_MODULES="ip_vs nf_conntrack br_netfilter" VM_MEM=4G VM_TIMEOUT=45m \
		../../../hack/vm.sh "${services_test}" -test.timeout 40m -test.skip '^(TestMigration|TestDifferencesDocumented)$')
fi

log "go test hack/bench (the benchmark's parsers and quantiles; the benchmark itself is hack/bench.sh)"
go -C hack/bench test ${count} -race "$@" ./...

log "go test hack/kubeproxyref (kube-proxy's flags and kubeadm's ConfigMap in testdata are those of the pinned Kubernetes)"
go -C hack/kubeproxyref test ${count} -race "$@" ./...

log "go test hack/difftest (kpng's brain agrees with kube-proxy 1.36's pkg/proxy on 300 random clusters, 8 updates each)"
go -C hack/difftest test ${count} -race "$@" ./...

log "mutation check (difftest catches each decision bug planted in the brain, on the same budget)"
go -C hack/difftest test ${count} -tags kpngmutation -run TestMutations ./...

log "go test hack/manifests (every kustomization under deploy/ builds, and the API server accepts it in a server-side dry-run)"
go -C hack/manifests test ${count} -race "$@" ./...

log "go test hack/image (hack/image.sh twice: same digest; the tools run in the image; containerd imports it)"
go -C hack/image test ${count} "$@" ./...

log "go test hack/node/conformance and mkimage (docs/conformance.md's table from recorded e2e runs; the node images' layers)"
go -C hack/node vet ./conformance/ ./mkimage/ ./pause/
go -C hack/node test ${count} -race "$@" ./conformance/ ./mkimage/

# The real-node smoke test: two kubelet nodes (containerd, CNI bridge) in
# network namespaces of their own, kpng's image from hack/image.sh deployed
# with deploy/kube-proxy-replacement, CoreDNS; a pod reaches a ClusterIP, a
# Service by name and both NodePorts. Upstream's whole Service e2e suite is
# hack/e2e-node.sh without --smoke (docs/conformance.md). Its builds are
# cached in .cache/node; a focused run (arguments given) leaves it out.
if (($# == 0)); then
	for b in nft iptables; do
		log "real nodes: kubelets with kpng (${b}) as their service proxy (hack/e2e-node.sh --smoke --backend ${b})"
		hack/e2e-node.sh --smoke --backend "${b}"
	done
	log "real nodes: kpng split in a brain and node agents (hack/e2e-node.sh --smoke --split)"
	hack/e2e-node.sh --smoke --split
fi

log "all tests passed"
