#!/usr/bin/env bash
# image.sh builds kpng's container image without pulling from any registry:
# the kpng binary (static) plus the user-space tools its backends run
# (iptables and ip6tables in both variants, nft, conntrack) and the shared
# libraries they need, all taken from the machine's Debian packages with
# `apt-get download`, assembled by hack/image (go-containerregistry).
#
#   hack/image.sh [--output FILE] [--version TAG] [--name NAME]
#
# writes an OCI image-layout tarball (index.json at its root, and Docker's
# manifest.json) that `ctr -n k8s.io images import FILE`, `docker load -i
# FILE` and `podman load -i FILE` accept, named NAME:TAG (default
# kpng.local/kpng:<version>), and prints the name and the manifest digest.
# The version defaults to the commit's (a tag if HEAD has one, otherwise a
# Go-style pseudo-version), and every time in the image is the commit's, so
# building the same commit with the same Go and packages gives the same
# digest.
#
# The .deb files are cached in .cache/image/debs (git-ignored); as root it
# runs apt-get update when the package lists do not know a package.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
die() { printf 'image.sh: error: %s\n' "$*" >&2; exit 1; }

output="" version="" name="kpng.local/kpng"
while (($#)); do
	case "$1" in
	--output) output="${2:?--output needs a file}"; shift 2 ;;
	--output=*) output="${1#*=}"; shift ;;
	--version) version="${2:?--version needs a tag}"; shift 2 ;;
	--version=*) version="${1#*=}"; shift ;;
	--name) name="${2:?--name needs a name}"; shift 2 ;;
	--name=*) name="${1#*=}"; shift ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done

command -v apt-get >/dev/null || die "needs apt-get (a Debian machine) to fetch the packages"
command -v dpkg-deb >/dev/null || die "needs dpkg-deb"

commit="$(git rev-parse HEAD)"
epoch="$(git show -s --format=%ct HEAD)"
tree_state=clean
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
	tree_state=dirty
fi
if [[ -z ${version} ]]; then
	if ! version="$(git describe --tags --exact-match --match 'v*' 2>/dev/null)"; then
		version="v0.0.0-$(TZ=UTC git show -s --date=format-local:%Y%m%d%H%M%S --format=%cd HEAD)-${commit:0:12}"
	fi
	if [[ ${tree_state} == dirty ]]; then
		version+="-dirty"
	fi
fi
major=0 minor=0
if [[ ${version} =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
	major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
fi
build_date="$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ)"
cache="${root}/.cache/image"
output="${output:-${cache}/kpng-${version}.tar}"
mkdir -p "${cache}/debs" "$(dirname "${output}")"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# kpng, stamped as Kubernetes stamps kube-proxy (component-base's version for
# --version and kubernetes_build_info, client-go's for the User-Agent).
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
	ldflags+=" -X ${pkg}.gitCommit=${commit} -X ${pkg}.gitTreeState=${tree_state} -X ${pkg}.buildDate=${build_date}"
done
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false -ldflags "${ldflags}" -o "${work}/kpng" ./cmd/kpng

# The packages and everything they depend on (Depends and Pre-Depends).
packages=(iptables nftables conntrack)
closure() {
	apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances "${packages[@]}" 2>/dev/null |
		grep -v '^ ' | grep -v '^<' | sort -u
}
deps="$(closure)"
if ! grep -qx iptables <<<"${deps}"; then
	((EUID == 0)) || die "apt-cache does not know iptables: run apt-get update (as root)"
	apt-get update -qq || die "apt-get update failed"
	deps="$(closure)"
	grep -qx iptables <<<"${deps}" || die "apt-cache still does not know iptables"
fi
mapfile -t deps <<<"${deps}"
# Download each package version once into the cache; link the ones this
# image uses into the work dir, so a stale version never slips in.
mkdir -p "${work}/debs"
for pkg in "${deps[@]}"; do
	ver="$(apt-cache policy "${pkg}" | awk '/Candidate:/ {print $2}')"
	[[ -n ${ver} && ${ver} != "(none)" ]] || die "no candidate version of ${pkg}"
	file="$(find "${cache}/debs" -maxdepth 1 -name "${pkg}_${ver//:/%3a}_*.deb" -print -quit)"
	if [[ -z ${file} ]]; then
		(cd "${cache}/debs" && apt-get download -qq "${pkg}=${ver}" 2>&1 | grep -v 'unsandboxed' >&2 || true)
		file="$(find "${cache}/debs" -maxdepth 1 -name "${pkg}_${ver//:/%3a}_*.deb" -print -quit)"
		[[ -n ${file} ]] || die "apt-get download ${pkg}=${ver} gave no file"
	fi
	ln -s "${file}" "${work}/debs/"
done

go -C hack/image run . --kpng "${work}/kpng" --debs "${work}/debs" --name "${name}" \
	--version "${version}" --epoch "${epoch}" --output "${output}"
echo "wrote ${output}"
