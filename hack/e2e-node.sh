#!/usr/bin/env bash
# e2e-node.sh runs upstream Kubernetes' Service e2e tests (e2e.test from the
# pinned k8s.io/kubernetes module) against real kubelet nodes whose service
# proxy is kpng (deploy/kube-proxy-replacement) or kube-proxy (kubeadm's
# DaemonSet), on one Debian machine, as root, pulling from no registry:
#
#   hack/e2e-node.sh [--proxy kpng|kube-proxy] [--backend nft|iptables]
#                    [--split] [--focus RE] [--skip RE] [--nodes N] [--smoke]
#                    [--record [--suite NAME]] [--keep] [--build-only]
#
# What it starts, each process in network namespaces of its own (named
# kpn18-<run>-*) joined by a bridge in another, so that nothing touches the
# host's network or firewall:
#   - cp: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and
#     e2e.test itself (10.99.0.10);
#   - n1..nN: containerd and a kubelet (10.99.0.1N, hostname nN in a UTS
#     namespace of its own, zone zone-((N-1)%3): the Traffic Distribution
#     specs want 3 zones of 2 nodes, --nodes 6), pod CIDR 10.244.N.0/24
#     on a CNI bridge, routes to the other nodes' pod CIDRs. Each node also
#     has a mount namespace of its own, in which /run and /var/log are
#     private tmpfs (CNI netns files, xtables lock, container logs) and the
#     four kernel sysctls the kubelet would otherwise rewrite host-wide are
#     shadowed by files holding the values it wants;
#   - cgroups under /kpn18-<run>/nN in each v1 hierarchy (the kubelet's
#     cgroupRoot).
# A trap removes all of it, after a failure too (--keep leaves it running
# until Ctrl-C, for debugging).
#
# Everything is built into the git-ignored .cache/node (hack/node: kubelet,
# controller manager, scheduler, kubectl, agnhost, e2e.test, pause, mkimage;
# containerd with go install) and rebuilt only when its inputs change. The
# images (pause, agnhost with the shell tools the tests exec, kpng's from
# hack/image.sh, kube-proxy's on top of it) are built locally and imported
# into each node's containerd under the names `e2e.test --list-images`
# gives, so IfNotPresent never pulls.
#
# --smoke stops after checking that a pod reaches a ClusterIP and a NodePort
# through the proxy (about a minute with everything cached: nodes Ready in
# ~45s). --record appends the run's Ginkgo summary to docs/conformance.md;
# e2e.test's whole output is kept in .cache/node/runs. A cold cache costs
# roughly: kubelet, controller manager, scheduler, kubectl, agnhost 8 min,
# e2e.test 4 min, containerd 1.5 min, the agnhost image's Debian packages
# 3.5 min (on 2 busy cores).
#
# --split deploys deploy/split instead: the brain on n1 (labelled
# control-plane), an agent on every node, certificates from kpng certs.
# CoreDNS (built with go install, cached) serves cluster.local at
# 10.96.0.10, as kubeadm's does, so specs reach Services by name.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${root}/.cache/node"
bin="${cache}/bin"
K8S_VERSION=v1.36.3 # must match hack/node/go.mod
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.14.7
DNS_IP=10.96.0.10

proxy=kpng backend=nft focus='\[sig-network\] Services' skip='\[Disruptive\]|SCTP|\[Feature:' nodes=2
smoke=0 record=0 keep=0 build_only=0 split=0 suite=
while (($#)); do
	case "$1" in
	--proxy) proxy="$2"; shift 2 ;;
	--backend) backend="$2"; shift 2 ;;
	--focus) focus="$2"; shift 2 ;;
	--skip) skip="$2"; shift 2 ;;
	--nodes) nodes="$2"; shift 2 ;;
	--split) split=1; shift ;;
	--smoke) smoke=1; shift ;;
	--record) record=1; shift ;;
	--suite) suite="$2"; shift 2 ;;
	--keep) keep=1; shift ;;
	--build-only) build_only=1; shift ;;
	-h | --help) sed -n '2,47p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "e2e-node.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case "${proxy}/${backend}" in kpng/nft | kpng/iptables | kube-proxy/nft | kube-proxy/iptables) ;;
*) echo "e2e-node.sh: --proxy kpng|kube-proxy, --backend nft|iptables" >&2; exit 2 ;;
esac
((split == 0)) || [[ ${proxy} == kpng ]] || { echo "e2e-node.sh: --split is kpng's (deploy/split)" >&2; exit 2; }
((nodes >= 1 && nodes <= 9)) || { echo "e2e-node.sh: --nodes 1..9" >&2; exit 2; }

t0=${SECONDS}
log() { printf 'e2e-node [%4ds]: %s\n' "$((SECONDS - t0))" "$*" >&2; }
die() { printf 'e2e-node: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- builds

ldflags() {
	local pkg var out=""
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		for var in "gitVersion=${K8S_VERSION}" gitMajor=1 "gitMinor=$(cut -d. -f2 <<<"${K8S_VERSION}")" \
			gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
			out+=" -X ${pkg}.${var}"
		done
	done
	printf '%s' "${out# }"
}

# stamp prints what hack/node's binaries depend on.
stamp() {
	cat "${root}/hack/node/go.mod" "${root}/hack/node/go.sum" \
		"${root}/hack/node/pause/main.go" "${root}/hack/node/mkimage/main.go" | sha256sum | cut -d' ' -f1
	go env GOVERSION GOOS GOARCH | tr '\n' ' '
}

build() {
	command -v go >/dev/null || die "go is not in PATH"
	mkdir -p "${bin}"
	"${root}/hack/install-test-deps.sh" >&2 # etcd, kube-apiserver, kube-proxy
	local pkgs=() missing=()
	for p in runc containernetworking-plugins openssl util-linux iproute2; do
		dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed' || missing+=("${p}")
	done
	if ((${#missing[@]})); then
		log "installing Debian packages ${missing[*]}"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
	fi

	want_stamp="$(stamp | tr '\n' ' ')"
	local s tmp name
	tmp="$(mktemp -d "${bin}/.build.XXXXXX")"
	local tools=(kubelet kube-controller-manager kube-scheduler kubectl agnhost regression-issue-74839 mkimage pause)
	local fresh_all=1
	for name in "${tools[@]}"; do
		[[ -x "${bin}/${name}" && "$(cat "${bin}/${name}.stamp" 2>/dev/null)" == "${want_stamp}" ]] || fresh_all=0
	done
	if ((fresh_all == 0)); then
		log "building ${tools[*]} from k8s.io/kubernetes ${K8S_VERSION} (minutes on a cold cache)"
		s=${SECONDS}
		(cd "${root}/hack/node" && CGO_ENABLED=0 go build -trimpath -ldflags="$(ldflags)" -o "${tmp}/" \
			k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
			k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
			k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/regression-issue-74839 \
			./mkimage ./pause) || { rm -rf "${tmp}"; die "build failed"; }
		for name in "${tools[@]}"; do
			mv -f "${tmp}/${name}" "${bin}/${name}" && printf '%s' "${want_stamp}" >"${bin}/${name}.stamp"
		done
		log "built ${tools[*]} in $((SECONDS - s))s"
	fi
	# --smoke runs no spec: it does without e2e.test (4 minutes of a cold
	# CI run).
	if ((smoke == 0)) && ! [[ -x "${bin}/e2e.test" && "$(cat "${bin}/e2e.test.stamp" 2>/dev/null)" == "${want_stamp}" ]]; then
		log "building e2e.test (go test -c k8s.io/kubernetes/test/e2e; minutes on a cold cache)"
		s=${SECONDS}
		(cd "${root}/hack/node" && CGO_ENABLED=0 go test -c -trimpath -ldflags="$(ldflags)" \
			-o "${tmp}/e2e.test" k8s.io/kubernetes/test/e2e) || { rm -rf "${tmp}"; die "e2e.test build failed"; }
		mv -f "${tmp}/e2e.test" "${bin}/e2e.test" && printf '%s' "${want_stamp}" >"${bin}/e2e.test.stamp"
		log "built e2e.test in $((SECONDS - s))s"
	fi
	local cstamp="containerd ${CONTAINERD_VERSION} $(go env GOVERSION)"
	if ! [[ -x "${bin}/containerd" && "$(cat "${bin}/containerd.stamp" 2>/dev/null)" == "${cstamp}" ]]; then
		log "building containerd ${CONTAINERD_VERSION}"
		s=${SECONDS}
		(cd "${tmp}" && GOBIN="${tmp}" CGO_ENABLED=0 GOFLAGS=-trimpath go install \
			"github.com/containerd/containerd/v2/cmd/containerd@${CONTAINERD_VERSION}" \
			"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" \
			"github.com/containerd/containerd/v2/cmd/ctr@${CONTAINERD_VERSION}") || { rm -rf "${tmp}"; die "containerd build failed"; }
		for name in containerd containerd-shim-runc-v2 ctr; do mv -f "${tmp}/${name}" "${bin}/${name}"; done
		printf '%s' "${cstamp}" >"${bin}/containerd.stamp"
		log "built containerd in $((SECONDS - s))s"
	fi
	# CoreDNS, the cluster DNS kubeadm installs: upstream's tests reach
	# Services by name.
	local dstamp="coredns ${COREDNS_VERSION} $(go env GOVERSION)"
	if ! [[ -x "${bin}/coredns" && "$(cat "${bin}/coredns.stamp" 2>/dev/null)" == "${dstamp}" ]]; then
		log "building CoreDNS ${COREDNS_VERSION}"
		s=${SECONDS}
		(cd "${tmp}" && GOBIN="${tmp}" CGO_ENABLED=0 GOFLAGS=-trimpath go install \
			"github.com/coredns/coredns@${COREDNS_VERSION}") || { rm -rf "${tmp}"; die "CoreDNS build failed"; }
		mv -f "${tmp}/coredns" "${bin}/coredns"
		printf '%s' "${dstamp}" >"${bin}/coredns.stamp"
		log "built CoreDNS in $((SECONDS - s))s"
	fi
	rm -rf "${tmp}"
	build_images
}

# image_names sets pause_image and agnhost_image to the names e2e.test uses
# (agnhost_names: every agnhost name it lists, each a --name for mkimage;
# busybox_names and boom_names likewise, for the Conntrack specs' busybox
# and regression-issue-74839 images).
image_names() {
	local list
	if ((smoke)) && ! [[ -x "${bin}/e2e.test" ]]; then
		# No spec runs: any names do, as long as containerd's sandbox image
		# and the pods' agree with the images imported.
		pause_image=kpng.local/pause:smoke agnhost_image=kpng.local/agnhost:smoke
		agnhost_names=("--name=${agnhost_image}")
		busybox_names=("--name=kpng.local/busybox:smoke")
		boom_names=("--name=kpng.local/regression-issue-74839:smoke")
		return
	fi
	list="$("${bin}/e2e.test" --list-images 2>/dev/null)"
	pause_image="$(grep -m1 '/pause:' <<<"${list}")"
	agnhost_image="$(grep '/e2e-test-images/agnhost:' <<<"${list}" | sort -V | tail -n1)"
	# distroless-iptables, the image of iptables and conntrack the KubeProxy
	# spec reads conntrack entries with, is served by the same image: it has
	# iptables, conntrack, a shell and coreutils.
	mapfile -t agnhost_names < <(grep -E '/agnhost:|/distroless-iptables:' <<<"${list}" | sed 's/^/--name=/')
	mapfile -t busybox_names < <(grep '/busybox:' <<<"${list}" | sed 's/^/--name=/')
	mapfile -t boom_names < <(grep '/regression-issue-74839:' <<<"${list}" | sed 's/^/--name=/')
	((${#busybox_names[@]} && ${#boom_names[@]})) || die "e2e.test --list-images names no busybox or regression-issue-74839 image"
	[[ -n ${pause_image} && -n ${agnhost_image} ]] || die "e2e.test --list-images names no pause or agnhost image"
}

# debs_closure DIR PKG... links the .deb files of PKG and what they depend
# on into DIR (cached in .cache/image/debs, shared with hack/image.sh).
debs_closure() {
	local dir="$1" pkg ver file debs="${root}/.cache/image/debs"
	shift
	mkdir -p "${dir}" "${debs}"
	while read -r pkg; do
		ver="$(apt-cache policy "${pkg}" | awk '/Candidate:/ {print $2}')"
		[[ -n ${ver} && ${ver} != "(none)" ]] || continue
		file="$(find "${debs}" -maxdepth 1 -name "${pkg}_${ver//:/%3a}_*.deb" -print -quit)"
		if [[ -z ${file} ]]; then
			(cd "${debs}" && apt-get download -qq "${pkg}=${ver}" >/dev/null 2>&1) || die "apt-get download ${pkg}"
			file="$(find "${debs}" -maxdepth 1 -name "${pkg}_${ver//:/%3a}_*.deb" -print -quit)"
		fi
		ln -sf "${file}" "${dir}/"
	done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
		--no-replaces --no-enhances "$@" 2>/dev/null | grep -v '^ ' | grep -v '^<' | sort -u)
}

build_images() {
	image_names
	local img="${cache}/images" s=${SECONDS} tmp
	mkdir -p "${img}"
	tmp="$(mktemp -d "${img}/.build.XXXXXX")"
	# pause: the sandbox image, one static binary.
	"${bin}/mkimage" --output "${tmp}/pause.tar" --name "${pause_image}" \
		--entrypoint /pause "${bin}/pause=/pause"
	coredns_image="kpng.local/coredns:${COREDNS_VERSION}"
	"${bin}/mkimage" --output "${tmp}/coredns.tar" --name "${coredns_image}" \
		--entrypoint /coredns "${bin}/coredns=/coredns"
	# The Conntrack specs' server that injects an out-of-window TCP
	# packet, built from the module's test/images, as upstream's image is.
	"${bin}/mkimage" --output "${tmp}/boom.tar" "${boom_names[@]}" \
		--entrypoint /regression-issue-74839 "${bin}/regression-issue-74839=/regression-issue-74839"
	# busybox: Debian's static build, a link for each of its applets and
	# "sh" for its command, as in upstream's image (busybox's own).
	debs_closure "${tmp}/busybox-deb" busybox-static
	dpkg-deb -x "${tmp}"/busybox-deb/busybox-static_*.deb "${tmp}/busybox-root"
	local bb_links
	mapfile -t bb_links < <("${tmp}/busybox-root/bin/busybox" --list-full | grep -v '^bin/busybox$' | sed 's#^#--link=/#; s#$#=/bin/busybox#')
	((${#bb_links[@]} > 100)) || die "busybox lists only ${#bb_links[@]} applets"
	"${bin}/mkimage" --output "${tmp}/busybox.tar" "${busybox_names[@]}" "${bb_links[@]}" \
		--arg sh "${tmp}/busybox-root/bin/busybox=/bin/busybox"
	# agnhost: the binary, plus the shell tools the tests exec in it (the
	# upstream image is Alpine with curl, nc, ip...), from Debian packages,
	# assembled by hack/image (which puts its binary at /usr/local/bin/kpng
	# and wants iptables and nft among the packages).
	# The tools the specs run in it (curl, nc, wget, dig, conntrack, ...),
	# and the links Debian's update-alternatives would make for them.
	local agn_pkgs=(dash bash coreutils grep sed gawk findutils procps curl wget hostname
		netcat-openbsd iproute2 iputils-ping dnsutils conntrack iptables nftables)
	local agn_links=(--link=/bin/nc=nc.openbsd --link=/usr/bin/awk=gawk)
	local agn_stamp
	agn_stamp="$({ sha256sum <"${bin}/agnhost"; echo "${agn_pkgs[*]} ${agn_links[*]} ${agnhost_names[*]}"; } | sha256sum)"
	if ! [[ -f "${img}/agnhost.tar" && "$(cat "${img}/agnhost.stamp" 2>/dev/null)" == "${agn_stamp}" ]]; then
		debs_closure "${tmp}/debs" "${agn_pkgs[@]}"
		go -C "${root}/hack/image" run . --kpng "${bin}/agnhost" --debs "${tmp}/debs" --name kpng.local/agnhost-base \
			--version v0 --epoch 0 "${agn_links[@]}" --output "${tmp}/agnhost-base.tar" >&2
		"${bin}/mkimage" --output "${tmp}/agnhost.tar" "${agnhost_names[@]}" --base "${tmp}/agnhost-base.tar" \
			--entrypoint /agnhost "${bin}/agnhost=/agnhost"
		mv -f "${tmp}/agnhost.tar" "${img}/agnhost.tar"
		printf '%s' "${agn_stamp}" >"${img}/agnhost.stamp"
	fi
	# kpng's own image, as a user builds it, and kube-proxy's on top of it
	# (its iptables, nft and conntrack), kubeadm's name for it.
	kpng_image="$("${root}/hack/image.sh" --output "${tmp}/kpng.tar" | awk '/^kpng.local\/kpng:/ {print $1}')"
	[[ -n ${kpng_image} ]] || die "hack/image.sh printed no image name"
	kube_proxy_image="kpng.local/kube-proxy:${K8S_VERSION}"
	"${bin}/mkimage" --output "${tmp}/kube-proxy.tar" --name "${kube_proxy_image}" --base "${tmp}/kpng.tar" \
		--entrypoint /usr/local/bin/kube-proxy "${root}/.cache/bin/kube-proxy=/usr/local/bin/kube-proxy"
	# Renamed into place, so that a run importing them meanwhile reads
	# whole files.
	local t
	for t in pause coredns boom busybox kpng kube-proxy; do mv -f "${tmp}/${t}.tar" "${img}/${t}.tar"; done
	rm -rf "${tmp}"
	log "images built in $((SECONDS - s))s: ${pause_image} ${agnhost_image} ${kpng_image} ${kube_proxy_image}"
}

build
((build_only == 0)) || exit 0
((EUID == 0)) || die "run as root: it creates network namespaces, cgroups and mounts"

# ---------------------------------------------------------------- cluster

run="$(printf '%04x' $((RANDOM)))"
pfx="kpn18-${run}"
R="$(mktemp -d "/tmp/${pfx}.XXXX")"
cgroot="/${pfx}"
brns="${pfx}-br" cpns="${pfx}-cp"
cp_ip=10.99.0.10
pids=()
export KUBECONFIG="${R}/admin.kubeconfig"

in_cp() { nsenter --net="/run/netns/${cpns}" -- "$@"; }
in_node() { local i="$1"; shift; nsenter --mount="${R}/n${i}/mntns" --uts="${R}/n${i}/utsns" --net="/run/netns/${pfx}-n${i}" -- "$@"; }
kubectl() { in_cp "${bin}/kubectl" --kubeconfig "${KUBECONFIG}" "$@"; }

cleanup() {
	local rc=$? i pid cg d
	trap - EXIT INT TERM
	if ((keep)) && ((rc == 0)); then
		log "--keep: cluster left running (KUBECONFIG=${KUBECONFIG}; in netns ${cpns}); Ctrl-C to remove it"
		sleep infinity & wait $! || true
	fi
	log "tearing down ${R}"
	# Kubelets and containerds first (SIGKILL: a daemon shutting down
	# gracefully still starts shims and containers), then every process in
	# the nodes' cgroups (the containers) and every process whose command
	# line names this run's folder (shims, the control plane). Again until
	# a pass finds none: a process started during a pass may have a lower
	# pid than the scan had reached (pids wrap), and was missed.
	for pid in "${pids[@]}"; do kill -9 "${pid}" 2>/dev/null || true; done
	local pass found
	for ((pass = 0; pass < 50; pass++)); do
		found=0
		for cg in /sys/fs/cgroup/pids"${cgroot}" /sys/fs/cgroup/freezer"${cgroot}"; do
			[[ -d ${cg} ]] || continue
			for pid in $(find "${cg}" -name cgroup.procs -exec cat {} + 2>/dev/null); do
				kill -9 "${pid}" 2>/dev/null && found=1
			done
		done
		for d in /proc/[0-9]*; do
			if { tr '\0' ' ' <"${d}/cmdline"; } 2>/dev/null | grep -qF "${R}/"; then
				kill -9 "${d#/proc/}" 2>/dev/null && found=1
			fi
		done
		((found)) || break
		sleep 0.2
	done
	((found == 0)) || log "processes of ${R} still alive after ${pass} passes"
	# Mounts: each node's mount namespace holds its own (overlays, tmpfs,
	# netns files) and goes away with its last process and this bind.
	for ((i = 1; i <= nodes; i++)); do
		[[ -e "${R}/n${i}/mntns" ]] && umount -l "${R}/n${i}/mntns" 2>/dev/null || true
		[[ -e "${R}/n${i}/utsns" ]] && umount -l "${R}/n${i}/utsns" 2>/dev/null || true
	done
	grep -F " ${R}/" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	# cgroups, deepest first, in every hierarchy.
	for d in /sys/fs/cgroup/*"${cgroot}"; do
		[[ -d ${d} ]] && find "${d}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	for ((i = 1; i <= nodes; i++)); do ip netns del "${pfx}-n${i}" 2>/dev/null || true; done
	ip netns del "${cpns}" 2>/dev/null || true
	ip netns del "${brns}" 2>/dev/null || true
	rm -rf "${R}" 2>/dev/null || log "could not remove all of ${R}"
	log "done (exit ${rc})"
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for WHAT SECONDS CMD...: runs CMD until it succeeds.
wait_for() {
	local what="$1" limit="$2" end=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || die "${what}: not after ${limit}s"
		sleep 1
	done
}

# start NAME NETNS-RUNNER... CMD: runs a process in the background, logging to R/NAME.log.
start() {
	local name="$1"
	shift
	"$@" >"${R}/${name}.log" 2>&1 &
	pids+=($!)
}

network() {
	ip netns add "${brns}"
	ip -n "${brns}" link set lo up
	ip -n "${brns}" link add br0 type bridge
	ip -n "${brns}" addr add 10.99.0.1/24 dev br0
	ip -n "${brns}" link set br0 up
	local i ns addr
	for i in cp $(seq 1 "${nodes}"); do
		if [[ ${i} == cp ]]; then ns="${cpns}" addr="${cp_ip}"; else ns="${pfx}-n${i}" addr="10.99.0.1${i}"; fi
		ip netns add "${ns}"
		ip -n "${brns}" link add "v${i}" type veth peer name eth0 netns "${ns}"
		ip -n "${brns}" link set "v${i}" master br0 up
		ip -n "${ns}" link set lo up
		ip -n "${ns}" addr add "${addr}/24" dev eth0
		ip -n "${ns}" link set eth0 up
		ip -n "${ns}" route add default via 10.99.0.1
		local j
		for j in $(seq 1 "${nodes}"); do
			[[ ${j} == "${i}" ]] || ip -n "${ns}" route add "10.244.${j}.0/24" via "10.99.0.1${j}"
		done
	done
}

certs() {
	local d="${R}/pki"
	mkdir -p "${d}"
	(
		cd "${d}"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=kpng-e2e-ca
		openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver
		printf 'subjectAltName=IP:%s,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' "${cp_ip}" >ext
		openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 2 -extfile ext
		openssl genrsa -out sa.key 2048
		openssl rsa -in sa.key -pubout -out sa.pub
	) >/dev/null 2>&1 || die "openssl failed"
	local tok i
	tok="$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
	printf '%s,admin,admin,system:masters\n' "${tok}" >"${d}/tokens.csv"
	kubeconfig "${R}/admin.kubeconfig" "${tok}"
	for ((i = 1; i <= nodes; i++)); do
		tok="$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
		printf '%s,system:node:n%s,n%s,system:nodes\n' "${tok}" "${i}" "${i}" >>"${d}/tokens.csv"
		kubeconfig "${R}/n${i}.kubeconfig" "${tok}"
	done
}

kubeconfig() {
	cat >"$1" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: e2e
		  cluster: {server: "https://${cp_ip}:6443", certificate-authority: "${R}/pki/ca.crt"}
		users:
		- name: e2e
		  user: {token: "$2"}
		contexts:
		- name: e2e
		  context: {cluster: e2e, user: e2e}
		current-context: e2e
	EOF
}

control_plane() {
	local d="${R}/cp" pki="${R}/pki"
	mkdir -p "${d}"
	start etcd in_cp etcd --name cp --data-dir "${d}/etcd" --listen-client-urls http://127.0.0.1:2379 \
		--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
		--initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster cp=http://127.0.0.1:2380
	start kube-apiserver in_cp "${root}/.cache/bin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
		--bind-address="${cp_ip}" --advertise-address="${cp_ip}" --secure-port=6443 \
		--tls-cert-file="${pki}/apiserver.crt" --tls-private-key-file="${pki}/apiserver.key" \
		--client-ca-file="${pki}/ca.crt" --token-auth-file="${pki}/tokens.csv" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--service-cluster-ip-range=10.96.0.0/16 --service-node-port-range=30000-32767 \
		--service-account-key-file="${pki}/sa.pub" --service-account-signing-key-file="${pki}/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc --allow-privileged=true \
		--kubelet-preferred-address-types=InternalIP --cert-dir="${d}/certs"
	wait_for "the API server" 120 kubectl get --raw /readyz
	start kube-controller-manager in_cp "${bin}/kube-controller-manager" --kubeconfig="${KUBECONFIG}" \
		--root-ca-file="${pki}/ca.crt" --service-account-private-key-file="${pki}/sa.key" \
		--use-service-account-credentials=true --leader-elect=false --bind-address=127.0.0.1 \
		--cluster-cidr=10.244.0.0/16 --service-cluster-ip-range=10.96.0.0/16 --allocate-node-cidrs=false
	start kube-scheduler in_cp "${bin}/kube-scheduler" --kubeconfig="${KUBECONFIG}" --leader-elect=false \
		--bind-address=127.0.0.1
	log "control plane up"
}

node_up() {
	local i="$1" d="${R}/n$1" c
	mkdir -p "${d}/cni/net.d" "${d}/sysctl"
	# The node's pod CIDR, set before its kubelet registers.
	kubectl apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: Node
		metadata: {name: n${i}}
		spec: {podCIDR: 10.244.${i}.0/24, podCIDRs: [10.244.${i}.0/24]}
	EOF
	# cgroups: the kubelet's root in every hierarchy (cpuset needs its
	# cpus and mems filled in before anything can join).
	for c in /sys/fs/cgroup/*/; do
		[[ -f "${c}cgroup.procs" ]] || continue
		mkdir -p "${c}${cgroot#/}/n${i}"
		if [[ -f "${c}cpuset.cpus" ]]; then
			cat "${c}cpuset.cpus" >"${c}${cgroot#/}/cpuset.cpus"
			cat "${c}cpuset.mems" >"${c}${cgroot#/}/cpuset.mems"
			cat "${c}cpuset.cpus" >"${c}${cgroot#/}/n${i}/cpuset.cpus"
			cat "${c}cpuset.mems" >"${c}${cgroot#/}/n${i}/cpuset.mems"
		fi
	done
	printf 1 >"${d}/sysctl/overcommit_memory"
	printf 10 >"${d}/sysctl/panic"
	printf 1 >"${d}/sysctl/panic_on_oops"
	printf 0 >"${d}/sysctl/panic_on_oom"
	# Its own hostname too: a host-network pod's hostname is its node's
	# name (upstream's specs compare them).
	touch "${d}/utsns"
	unshare --uts="${d}/utsns" hostname "n${i}"
	touch "${d}/mntns"
	unshare --mount="${d}/mntns" --propagation private sh -ec "
		mount -t tmpfs tmpfs /run
		mount -t tmpfs tmpfs /var/log
		mount --bind ${d}/sysctl/overcommit_memory /proc/sys/vm/overcommit_memory
		mount --bind ${d}/sysctl/panic_on_oom /proc/sys/vm/panic_on_oom
		mount --bind ${d}/sysctl/panic /proc/sys/kernel/panic
		mount --bind ${d}/sysctl/panic_on_oops /proc/sys/kernel/panic_on_oops
	"
	in_node "${i}" sysctl -qw net.ipv4.ip_forward=1
	cat >"${d}/cni/net.d/10-bridge.conflist" <<-EOF
		{"cniVersion": "1.0.0", "name": "e2e", "plugins": [
		  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
		   "ipam": {"type": "host-local", "dataDir": "${d}/cni/ipam", "ranges": [[{"subnet": "10.244.${i}.0/24"}]],
		            "routes": [{"dst": "0.0.0.0/0"}]}},
		  {"type": "portmap", "capabilities": {"portMappings": true}}]}
	EOF
	cat >"${d}/containerd.toml" <<-EOF
		version = 3
		root = "${d}/containerd/root"
		state = "${d}/containerd/state"
		[grpc]
		  address = "${d}/containerd.sock"
		[ttrpc]
		  address = "${d}/containerd.sock.ttrpc"
		[plugins."io.containerd.cri.v1.images".pinned_images]
		  sandbox = "${pause_image}"
		[plugins."io.containerd.cri.v1.runtime"]
		  restrict_oom_score_adj = true
		  disable_apparmor = true
		[plugins."io.containerd.cri.v1.runtime".cni]
		  bin_dirs = ["/usr/lib/cni"]
		  conf_dir = "${d}/cni/net.d"
		[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
		  runtime_type = "io.containerd.runc.v2"
		[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
		  BinaryName = "$(command -v runc)"
		  Root = "${d}/runc"
		  SystemdCgroup = false
	EOF
	start "n${i}-containerd" in_node "${i}" env PATH="${bin}:${PATH}" "${bin}/containerd" --config "${d}/containerd.toml"
	wait_for "containerd on n${i}" 60 in_node "${i}" "${bin}/ctr" --address "${d}/containerd.sock" version
	local t
	for t in pause agnhost coredns boom busybox kpng kube-proxy; do
		in_node "${i}" "${bin}/ctr" --address "${d}/containerd.sock" -n k8s.io images import \
			"${cache}/images/${t}.tar" >/dev/null || die "importing ${t} on n${i}"
	done
	cat >"${d}/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		failCgroupV1: false
		cgroupDriver: cgroupfs
		cgroupRoot: ${cgroot}/n${i}
		makeIPTablesUtilChains: false
		failSwapOn: false
		protectKernelDefaults: false
		containerRuntimeEndpoint: unix://${d}/containerd.sock
		podLogsDir: ${d}/pod-logs
		authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
		authorization: {mode: AlwaysAllow}
		healthzBindAddress: 127.0.0.1
		readOnlyPort: 0
		podCIDR: 10.244.${i}.0/24
		resolvConf: ""
		clusterDomain: cluster.local
		clusterDNS: [${DNS_IP}]
		evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		serializeImagePulls: false
		staticPodPath: ""
	EOF
	start "n${i}-kubelet" in_node "${i}" "${bin}/kubelet" --config="${d}/kubelet.yaml" \
		--kubeconfig="${R}/n${i}.kubeconfig" --root-dir="${d}/kubelet" --cert-dir="${d}/kubelet-pki" \
		--hostname-override="n${i}" --node-ip="10.99.0.1${i}" \
		--node-labels="topology.kubernetes.io/zone=zone-$(((i - 1) % 3))"
}

nodes_ready() {
	local n
	n="$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)"
	((n == nodes))
}

# proxy_manifests prints the kube-proxy ConfigMap, ServiceAccount and RBAC as
# kubeadm makes them, and the proxy's DaemonSet.
proxy_manifests() {
	local mode=nftables
	[[ ${backend} == nft ]] || mode=iptables
	cat <<-EOF
		apiVersion: v1
		kind: ServiceAccount
		metadata: {name: kube-proxy, namespace: kube-system}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: "kubeadm:node-proxier"}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-proxier"}
		subjects: [{kind: ServiceAccount, name: kube-proxy, namespace: kube-system}]
		---
		apiVersion: v1
		kind: ConfigMap
		metadata: {name: kube-proxy, namespace: kube-system, labels: {app: kube-proxy}}
		data:
		  config.conf: |
		    apiVersion: kubeproxy.config.k8s.io/v1alpha1
		    kind: KubeProxyConfiguration
		    bindAddress: 0.0.0.0
		    clientConnection:
		      kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
		    clusterCIDR: 10.244.0.0/16
		    mode: ${mode}
		    conntrack:
		      maxPerCore: 0
		  kubeconfig.conf: |
		    apiVersion: v1
		    kind: Config
		    clusters:
		    - cluster:
		        certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
		        server: https://${cp_ip}:6443
		      name: default
		    contexts:
		    - context: {cluster: default, namespace: default, user: default}
		      name: default
		    current-context: default
		    users:
		    - name: default
		      user:
		        tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
		---
	EOF
	if ((split)); then
		# deploy/split as an operator applies it: the brain on the node
		# labelled control-plane (n1, host network), agents on every node
		# dialling it at n1's address, certificates from kpng certs.
		local to=to-nft
		[[ ${backend} == nft ]] || to=to-iptables
		"${bin}/kubectl" kustomize "${root}/deploy/split" |
			sed -e "s#image: kpng.local/kpng:.*#image: ${kpng_image}#" \
				-e "s#brain-address: .*#brain-address: tcp://10.99.0.11:12090#" \
				-e "s#^\\( *\\)- to-nft\$#\\1- ${to}\\n\\1- --cluster-cidr=10.244.0.0/16#"
		printf -- '---\n'
		go -C "${root}" run ./cmd/kpng certs --brain-name 10.99.0.11
	elif [[ ${proxy} == kpng ]]; then
		# Upstream's "restarting kube-proxy" spec finds the proxy's pods by
		# k8s-app=kube-proxy; with no kube-proxy here, kpng's carry it.
		"${bin}/kubectl" kustomize "${root}/deploy/kube-proxy-replacement" |
			sed -e "s#image: kpng.local/kpng:.*#image: ${kpng_image}#" -e "s#k8s-app: kpng\$#k8s-app: kube-proxy#"
	else
		cat <<-EOF
			apiVersion: apps/v1
			kind: DaemonSet
			metadata: {name: kube-proxy, namespace: kube-system, labels: {k8s-app: kube-proxy}}
			spec:
			  selector: {matchLabels: {k8s-app: kube-proxy}}
			  template:
			    metadata: {labels: {k8s-app: kube-proxy}}
			    spec:
			      priorityClassName: system-node-critical
			      hostNetwork: true
			      serviceAccountName: kube-proxy
			      tolerations: [{operator: Exists}]
			      containers:
			      - name: kube-proxy
			        image: ${kube_proxy_image}
			        imagePullPolicy: IfNotPresent
			        command: [/usr/local/bin/kube-proxy, --config=/var/lib/kube-proxy/config.conf, "--hostname-override=\$(NODE_NAME)"]
			        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
			        securityContext: {privileged: true}
			        volumeMounts:
			        - {mountPath: /var/lib/kube-proxy, name: kube-proxy}
			        - {mountPath: /run/xtables.lock, name: xtables-lock}
			        - {mountPath: /lib/modules, name: lib-modules, readOnly: true}
			      volumes:
			      - {name: kube-proxy, configMap: {name: kube-proxy}}
			      - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
			      - {name: lib-modules, hostPath: {path: /lib/modules}}
		EOF
	fi
}

deploy_proxy() {
	local ds=kpng
	[[ ${proxy} == kpng ]] || ds=kube-proxy
	proxy_manifests >"${R}/proxy.yaml"
	if ((split)); then
		ds=kpng-agent
		kubectl label node n1 node-role.kubernetes.io/control-plane= >/dev/null
	fi
	kubectl apply -f "${R}/proxy.yaml" >/dev/null
	# Short waits in a loop, so that Ctrl-C is not held up by kubectl.
	if ! (wait_for "the ${ds} DaemonSet" 300 kubectl -n kube-system rollout status "ds/${ds}" --timeout=2s); then
		kubectl -n kube-system get pods -o wide >&2
		kubectl -n kube-system logs "ds/${ds}" --tail=20 >&2 || true
		die "the ${ds} DaemonSet did not become ready"
	fi
	log "${proxy} (${backend}) ready on ${nodes} node(s)"
}

# deploy_dns runs CoreDNS as kubeadm deploys it (kube-dns Service at
# DNS_IP, the kubelets' clusterDNS), answering for cluster.local only: the
# nodes have no upstream resolver. It reaches the API server through the
# kubernetes Service, so it also proves the proxy's first ClusterIP.
deploy_dns() {
	kubectl apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: ServiceAccount
		metadata: {name: coredns, namespace: kube-system}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRole
		metadata: {name: "system:coredns"}
		rules:
		- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
		- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: "system:coredns"}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
		subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
		---
		apiVersion: v1
		kind: ConfigMap
		metadata: {name: coredns, namespace: kube-system}
		data:
		  Corefile: |
		    .:53 {
		        errors
		        health :8080
		        ready :8181
		        kubernetes cluster.local in-addr.arpa ip6.arpa {
		            pods insecure
		            fallthrough in-addr.arpa ip6.arpa
		            ttl 30
		        }
		        cache 30
		        loop
		        loadbalance
		    }
		---
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
		spec:
		  replicas: ${nodes}
		  selector: {matchLabels: {k8s-app: kube-dns}}
		  template:
		    metadata: {labels: {k8s-app: kube-dns}}
		    spec:
		      priorityClassName: system-cluster-critical
		      serviceAccountName: coredns
		      dnsPolicy: Default
		      tolerations: [{operator: Exists}]
		      containers:
		      - name: coredns
		        image: ${coredns_image}
		        imagePullPolicy: IfNotPresent
		        args: [-conf, /etc/coredns/Corefile]
		        ports:
		        - {containerPort: 53, name: dns, protocol: UDP}
		        - {containerPort: 53, name: dns-tcp, protocol: TCP}
		        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
		        livenessProbe: {httpGet: {path: /health, port: 8080}, initialDelaySeconds: 30}
		        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
		      volumes: [{name: config, configMap: {name: coredns}}]
		---
		apiVersion: v1
		kind: Service
		metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
		spec:
		  clusterIP: ${DNS_IP}
		  selector: {k8s-app: kube-dns}
		  ports:
		  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
		  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
	EOF
	if ! (wait_for "CoreDNS" 180 kubectl -n kube-system rollout status deployment/coredns --timeout=2s); then
		kubectl -n kube-system get pods -o wide >&2
		kubectl -n kube-system logs deployment/coredns --tail=20 >&2 || true
		die "CoreDNS did not become ready (it reaches the API server through the proxy's kubernetes Service)"
	fi
	log "CoreDNS ready at ${DNS_IP}"
}

smoke_test() {
	local s=${SECONDS} cip np
	kubectl create deployment smoke --image="${agnhost_image}" --replicas=2 -- /agnhost netexec --http-port=8080 >/dev/null
	kubectl expose deployment smoke --port=80 --target-port=8080 --type=NodePort >/dev/null
	kubectl run smoke-client --image="${agnhost_image}" --restart=Never --command -- /agnhost pause >/dev/null
	kubectl rollout status deployment/smoke --timeout=180s >&2
	kubectl wait --for=condition=Ready pod/smoke-client --timeout=180s >/dev/null
	# The tools upstream's specs run in agnhost pods (its own image is Alpine
	# with busybox; ours is Debian's).
	kubectl exec smoke-client -- sh -c 'for t in nc wget curl dig nslookup awk timeout hostname conntrack ip; do command -v "$t" >/dev/null || { echo "agnhost image lacks $t"; exit 1; }; done' >&2 ||
		die "the agnhost image lacks a tool the e2e specs run"
	cip="$(kubectl get svc smoke -o jsonpath='{.spec.clusterIP}')"
	np="$(kubectl get svc smoke -o jsonpath='{.spec.ports[0].nodePort}')"
	wait_for "ClusterIP ${cip}:80 from a pod" 60 kubectl exec smoke-client -- curl -sf --max-time 2 "http://${cip}/hostname"
	log "a pod reached ClusterIP ${cip}:80 ($(kubectl exec smoke-client -- curl -sf --max-time 2 "http://${cip}/hostname"))"
	wait_for "the Service by name (smoke.default.svc.cluster.local)" 60 kubectl exec smoke-client -- curl -sf --max-time 2 http://smoke.default.svc.cluster.local/hostname
	log "a pod reached the Service by its DNS name"
	local i
	for ((i = 1; i <= nodes; i++)); do
		wait_for "NodePort 10.99.0.1${i}:${np} from a pod" 60 kubectl exec smoke-client -- curl -sf --max-time 2 "http://10.99.0.1${i}:${np}/hostname"
		log "a pod reached NodePort 10.99.0.1${i}:${np}"
	done
	# kpng must know its own writes from someone else's inside its pod (a
	# PID namespace of its own): no repair was called for.
	if [[ ${proxy} == kpng ]]; then
		local app=kube-proxy repairs # the label the harness gives kpng's pods
		((split == 0)) || app=kpng-agent
		repairs="$(kubectl -n kube-system logs -l "k8s-app=${app}" --tail=-1 | grep -c "behind kpng's back" || true)"
		((repairs == 0)) || die "kpng took its own writes for someone else's ${repairs} time(s) (see its logs)"
		log "no repair: kpng told its own writes from others' in its pod"
	fi
	log "smoke passed in $((SECONDS - s))s (whole run so far $((SECONDS - t0))s)"
}

run_e2e() {
	# The output outlives the run (teardown removes R), for reading failures.
	local label="${proxy}-${backend}" s=${SECONDS} rc=0
	((split == 0)) || label+="-split"
	local out="${cache}/runs/${label}-${run}.out"
	mkdir -p "${R}/report" "${cache}/runs"
	log "e2e.test output: ${out}"
	log "e2e.test --ginkgo.focus='${focus}' --ginkgo.skip='${skip}'"
	in_cp "${bin}/e2e.test" --kubeconfig="${KUBECONFIG}" --kubectl-path="${bin}/kubectl" \
		--num-nodes="${nodes}" --ginkgo.focus="${focus}" --ginkgo.skip="${skip}" \
		--ginkgo.no-color --ginkgo.timeout=4h --report-dir="${R}/report" \
		--e2e-output-dir="${R}/report" --minStartupPods=0 2>&1 | tee "${out}" | grep -E '^(•|\[FAIL\]|Ran |FAIL|PASS|SUCCESS)' >&2 || rc=$?
	local summary
	summary="$(grep -E '^Ran [0-9]+ of [0-9]+ Specs|Passed \| [0-9]+ Failed' "${out}" | tail -n 2)"
	printf '%s\n' "${summary}"
	grep -E '^\s*\[(FAIL|TIMEDOUT|PANICKED|INTERRUPTED)\]' "${out}" | sort -u >"${R}/failed.txt" || true
	cat "${R}/failed.txt"
	# The JUnit report names the specs that passed; kept beside the output.
	: >"${R}/passed.txt"
	if [[ -f "${R}/report/junit_01.xml" ]]; then
		cp "${R}/report/junit_01.xml" "${out%.out}.junit.xml"
		go -C "${root}/hack/node" run ./conformance --passed "${R}/report/junit_01.xml" >"${R}/passed.txt" ||
			log "could not read the specs that passed from ${R}/report/junit_01.xml"
	fi
	log "e2e.test finished in $((SECONDS - s))s"
	if ((record)); then record_result "${summary}" "$((SECONDS - s))"; fi
}

# record_result keeps this run's summary in docs/conformance-runs (one file
# per configuration, replaced by its next run) and rewrites the table in
# docs/conformance.md from all of them.
record_result() {
	local label="${proxy} ${backend}" file
	((split == 0)) || label+=" split"
	# The suite (--suite, the global): by default the focus's first word
	# after "[sig-network] " (Services, Conntrack, ...); a run of another
	# focus is kept beside, not over, it.
	[[ -n ${suite} ]] || suite="$(sed -E 's/^\\\[sig-network\\\] //; s/[^A-Za-z0-9].*//' <<<"${focus}")"
	[[ -n ${suite} ]] || suite=custom
	file="${proxy}-${backend}"
	((split == 0)) || file+="-split"
	if [[ ${suite} != Services ]]; then label+=" (${suite})" file+="-${suite}"; fi
	file="${root}/docs/conformance-runs/${file}.txt"
	mkdir -p "$(dirname "${file}")"
	{
		printf 'label: %s\nproxy: %s\nmode: %s\nsuite: %s\nsplit: %s\n' "${label}" "${proxy}" "${backend}" "${suite}" "${split}"
		# -dirty: code changed, not docs (earlier --record runs write there).
		printf 'date: %s\nkpng: %s%s\nkubernetes: %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
			"$(git -C "${root}" describe --always)" \
			"$(git -C "${root}" diff --quiet HEAD -- . ':(exclude)docs' || echo -dirty)" "${K8S_VERSION}"
		printf 'containerd: %s\nrunc: %s\nnodes: %s\n' "${CONTAINERD_VERSION}" \
			"$(runc --version | head -n1 | awk '{print $3}')" "${nodes}"
		printf 'focus: %s\nskip: %s\nseconds: %s\n' "${focus}" "${skip}" "$2"
		printf 'ran: %s\nresult: %s\n' "$(grep -m1 '^Ran ' <<<"$1")" "$(grep -m1 'Passed |' <<<"$1")"
		printf 'passed:\n'
		cat "${R}/passed.txt"
		printf 'failed:\n'
		cat "${R}/failed.txt"
	} >"${file}"
	go -C "${root}/hack/node" run ./conformance --runs "${root}/docs/conformance-runs" --doc "${root}/docs/conformance.md" ||
		die "could not write docs/conformance.md"
	log "recorded in ${file} and docs/conformance.md"
}

log "run ${run} in ${R}"
network
certs
control_plane
for ((i = 1; i <= nodes; i++)); do node_up "${i}"; done
wait_for "${nodes} Ready node(s)" 180 nodes_ready
log "${nodes} node(s) Ready"
deploy_proxy
deploy_dns
if ((smoke)); then
	smoke_test
else
	run_e2e
fi
