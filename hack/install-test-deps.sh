#!/usr/bin/env bash
# install-test-deps.sh installs what kpng's integration and e2e tests run
# against, on a Debian machine that has Go:
#
#   - Debian packages: etcd-server (the API server's store), nftables,
#     iptables, conntrack and iproute2 (the dataplane tests),
#     protobuf-compiler (hack/generate.sh), containerd (its ctr imports
#     the image hack/image.sh builds), and clang, llvm and libbpf-dev
#     (go generate ./backends/ebpf compiles the BPF programs;
#     hack/verify-ebpf.sh checks the committed objects with them: building
#     kpng needs none of them); ipset and ipvsadm (the ipvs backend), and
#     what hack/vm.sh boots its VM with (qemu-system-x86, busybox-static,
#     kmod, cpio, xz-utils: the ipvs backend's kernel tests run there, as
#     the host kernel has no IPVS; docs/vm.md);
#   - kube-apiserver and kube-proxy, built from the Kubernetes module pinned in
#     hack/tools/go.mod, into the git-ignored folder .cache/bin.
#
# It is idempotent: packages already installed are left alone (and apt-get
# update runs only when something is missing), and the binaries are rebuilt
# only when the pinned versions or the Go toolchain changed. A second run
# costs well under a second.
#
# It uses the machine's own apt and Go settings and changes neither.
set -euo pipefail

log() { printf 'install-test-deps: %s\n' "$*"; }
die() { printf 'install-test-deps: error: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools"
bin="${root}/.cache/bin"

packages=(etcd-server nftables iptables conntrack iproute2 protobuf-compiler containerd clang llvm libbpf-dev
	ipset ipvsadm qemu-system-x86 busybox-static kmod cpio xz-utils)
binaries=(kube-apiserver kube-proxy)

install_packages() {
	local missing=() pkg
	for pkg in "${packages[@]}"; do
		if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("${pkg}")
		fi
	done
	if ((${#missing[@]} == 0)); then
		log "Debian packages already installed: ${packages[*]}"
		return
	fi

	command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get: install them by hand"
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null || die "missing packages ${missing[*]}: run as root, or install them by hand"
		sudo=(sudo)
	fi
	log "installing Debian packages: ${missing[*]}"
	"${sudo[@]}" apt-get update -qq || die "apt-get update failed"
	# Packages like etcd-server try to start a service; the tests start
	# their own etcd on free ports, so a running service does no harm.
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
		die "apt-get install ${missing[*]} failed"
}

# pinned_version prints the k8s.io/kubernetes version hack/tools requires.
pinned_version() {
	(cd "${tools}" && go list -m -f '{{.Version}}' k8s.io/kubernetes) ||
		die "cannot read the pinned k8s.io/kubernetes version from ${tools}/go.mod"
}

# build_stamp prints what the binaries depend on: the pinned module
# versions (go.mod and go.sum of hack/tools) and the Go toolchain and target.
build_stamp() {
	local k8s sums
	k8s="$(pinned_version)"
	sums="$(cat "${tools}/go.mod" "${tools}/go.sum" | sha256sum | cut -d' ' -f1)"
	printf 'k8s.io/kubernetes %s\nhack/tools %s\n%s\n' "${k8s}" "${sums}" \
		"$(go env GOVERSION GOOS GOARCH | tr '\n' ' ')"
}

build_binaries() {
	command -v go >/dev/null || die "go is not in PATH"
	mkdir -p "${bin}"
	local stamp want=() name
	stamp="$(build_stamp)"
	for name in "${binaries[@]}"; do
		if [[ -x "${bin}/${name}" && -f "${bin}/${name}.stamp" ]] &&
			[[ "$(cat "${bin}/${name}.stamp")" == "${stamp}" ]]; then
			log "${name} is up to date ($(head -n1 <<<"${stamp}"))"
		else
			want+=("${name}")
		fi
	done
	((${#want[@]} > 0)) || return 0

	local pkgs=() start version major minor ldflags=() pkg var
	for name in "${want[@]}"; do
		pkgs+=("k8s.io/kubernetes/cmd/${name}")
	done
	# Stamp the version the way Kubernetes' own build does (hack/lib/version.sh),
	# so /version and --version report v1.X.Y rather than v0.0.0-master.
	version="$(pinned_version)"
	major="${version#v}" && major="${major%%.*}"
	minor="${version#v*.}" && minor="${minor%%.*}"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		for var in "gitVersion=${version}" "gitMajor=${major}" "gitMinor=${minor}" \
			"gitTreeState=clean" "buildDate=1970-01-01T00:00:00Z"; do
			ldflags+=("-X ${pkg}.${var}")
		done
	done
	# Build into a temporary folder and move into place, so that an
	# interrupted build never leaves a binary the stamp check would trust.
	build_tmp="$(mktemp -d "${bin}/.build.XXXXXX")"
	trap 'rm -rf "${build_tmp}"' EXIT
	log "building ${want[*]} ($(head -n1 <<<"${stamp}")); the first build takes several minutes"
	start=${SECONDS}
	(cd "${tools}" && CGO_ENABLED=0 go build -trimpath -ldflags="${ldflags[*]}" -o "${build_tmp}/" "${pkgs[@]}") ||
		die "building ${want[*]} from ${tools} failed"
	for name in "${want[@]}"; do
		mv -f "${build_tmp}/${name}" "${bin}/${name}"
		printf '%s\n' "${stamp}" >"${bin}/${name}.stamp"
	done
	log "built ${want[*]} into ${bin} in $((SECONDS - start))s"
}

check() {
	local etcd
	etcd="$(command -v etcd)" || die "etcd is not in PATH after installing etcd-server"
	log "etcd: ${etcd} ($("${etcd}" --version | head -n1))"
	log "kube-apiserver: ${bin}/kube-apiserver ($("${bin}/kube-apiserver" --version))"
	log "kube-proxy: ${bin}/kube-proxy ($("${bin}/kube-proxy" --version))"
}

install_packages
build_binaries
check
log "done"
