#!/usr/bin/env bash
# vm.sh runs a command as root inside a small virtual machine booting
# Debian 12's Linux 6.1 (a kernel with IPVS as modules, which the
# development machines' kernel lacks), and exits with the command's status:
#
#   hack/vm.sh ipvsadm -Ln
#   hack/vm.sh go test -tags e2e ./backends/ipvs/     # any host path runs inside
#   VM_OUT=/tmp/results hack/vm.sh sh -c 'ipvsadm -Ln >"$VM_OUT/ipvs.txt"'
#
# The guest's root is the host's root, shared read-only over virtio-9p with a
# tmpfs overlay on top: every host file (Go, test binaries, iproute2) is
# there at its host path, and nothing the command writes reaches the host,
# except under $VM_OUT (default .cache/vm/out), a writable share mounted at
# the same path. The command runs in the host's working directory with the
# host's exported environment; its output (stdout and stderr together) is
# the VM's console. The VM has no network beyond its own loopback: tests
# make their namespaces inside it. See docs/vm.md.
#
# qemu runs with software emulation (-accel tcg -cpu max): /dev/kvm on
# kpng's machines serves only guests built for it. Settings:
#
#   VM_KERNEL  the kernel package (default: the one cached, else the one
#              Debian's linux-image-amd64 depends on), e.g.
#              linux-image-6.1.0-56-amd64
#   VM_MEM     guest memory (default 2G); VM_CPUS guest CPUs (default 2)
#   VM_OUT     the writable share (default .cache/vm/out)
#   VM_MODULES modules to load before the command (the host may have built
#              in or loaded what Debian's kernel has as modules), e.g.
#              "nf_conntrack ip_vs"
#   VM_TIMEOUT if set, kill the VM after this long (timeout(1) syntax)
#   VM_CONSOLE if set, a file that receives the kernel's console (the
#              last lines are printed anyway when the VM fails)
#
# Everything is cached in the git-ignored .cache/vm: the kernel package, its
# modules (depmod'ed), the uncompressed kernel and the initramfs. It installs
# what it needs with apt-get (qemu-system-x86, busybox-static, kmod, cpio,
# xz-utils) on a Debian machine, as hack/install-test-deps.sh does.
set -euo pipefail

log() { printf 'vm: %s\n' "$*" >&2; }
die() { printf 'vm: error: %s\n' "$*" >&2; exit 125; }

(($# > 0)) || die "usage: hack/vm.sh CMD [ARG...]"
((EUID == 0)) || die "run as root (qemu shares the host's root filesystem as it is)"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${root}/.cache/vm"
mkdir -p "${cache}"

packages=(qemu-system-x86 busybox-static kmod cpio xz-utils)
# The modules of the initramfs: virtio's PCI transport, 9p over it (which
# pulls netfs and fscache), and overlayfs.
initrd_modules=(virtio_pci 9pnet_virtio 9p overlay)

install_packages() {
	local missing=() pkg
	for pkg in "${packages[@]}"; do
		if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("${pkg}")
		fi
	done
	((${#missing[@]} == 0)) && return
	command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get: install them by hand"
	log "installing Debian packages: ${missing[*]}"
	apt-get update -qq || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		die "apt-get install ${missing[*]} failed"
}

# kernel_package prints the kernel package to boot: $VM_KERNEL, the one
# cached last, or the one Debian's linux-image-amd64 depends on now.
kernel_package() {
	if [[ -n ${VM_KERNEL:-} ]]; then
		echo "${VM_KERNEL}"
		return
	fi
	if [[ -s ${cache}/kernel.current ]]; then
		cat "${cache}/kernel.current"
		return
	fi
	local pkg
	pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1)"
	if [[ -z ${pkg} ]]; then
		apt-get update -qq >&2 || die "apt-get update failed"
		pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1)"
	fi
	[[ -n ${pkg} ]] || die "cannot tell the kernel package linux-image-amd64 depends on; set VM_KERNEL"
	echo "${pkg}"
}

# fetch_kernel downloads and unpacks package $1 into ${kdir}, depmod'ed.
fetch_kernel() {
	local pkg=$1 tmp deb
	[[ -f ${kdir}/.done ]] && return
	log "downloading ${pkg}"
	tmp="$(mktemp -d "${cache}/.dl.XXXXXX")"
	# apt's sandbox user cannot write into root's folders: download in /tmp.
	chmod 0777 "${tmp}"
	(cd "${tmp}" && apt-get download -qq "${pkg}") || {
		rm -rf "${tmp}"
		die "apt-get download ${pkg} failed (is it still in the archive? set VM_KERNEL)"
	}
	deb="$(echo "${tmp}"/*.deb)"
	rm -rf "${kdir}"
	mkdir -p "${kdir}"
	dpkg-deb -x "${deb}" "${kdir}"
	rm -rf "${tmp}"
	local kver
	kver="$(basename "$(echo "${kdir}"/lib/modules/*)")"
	depmod -b "${kdir}" "${kver}"
	touch "${kdir}/.done"
}

# extract_vmlinux writes the uncompressed kernel inside bzImage $1 to $2:
# qemu boots it (an ELF with a PVH entry) without the decompression that
# costs seconds under emulation.
extract_vmlinux() {
	local in=$1 out=$2 magic tool off
	for magic in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
		tool=${magic%%:*}
		while read -r off; do
			[[ -n ${off} ]] || continue
			tail -c "+$((off + 1))" "${in}" | "${tool}" -dc 2>/dev/null >"${out}.tmp" || true
			if [[ "$(head -c4 "${out}.tmp" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
				mv "${out}.tmp" "${out}"
				return
			fi
		done < <(LC_ALL=C grep -obUaP "${magic#*:}" "${in}" | cut -d: -f1 | head -n3)
	done
	rm -f "${out}.tmp"
	die "no compressed kernel found in ${in}"
}

# build_initrd writes the initramfs: busybox, hack/vm's two stages, and the
# modules the shares need, in the order to load them.
build_initrd() {
	local out=$1 tmp m path
	tmp="$(mktemp -d "${cache}/.initrd.XXXXXX")"
	mkdir -p "${tmp}"/{bin,proc,sys,dev,modules}
	cp /bin/busybox "${tmp}/bin/busybox"
	cp "${root}/hack/vm/init" "${tmp}/init"
	cp "${root}/hack/vm/stage2" "${tmp}/stage2"
	: >"${tmp}/modules.load"
	for m in "${initrd_modules[@]}"; do
		modprobe -d "${kdir}" -S "${kver}" --show-depends "${m}" ||
			die "module ${m} not found in ${kver}"
	done | while read -r cmd path _; do
		[[ ${cmd} == insmod ]] || continue
		m="$(basename "${path}")"
		grep -qxF "${m}" "${tmp}/modules.load" && continue
		cp "${path}" "${tmp}/modules/${m}"
		echo "${m}" >>"${tmp}/modules.load"
	done
	(cd "${tmp}" && find . | cpio -o -H newc --quiet) | gzip -1 >"${out}.tmp"
	mv "${out}.tmp" "${out}"
	rm -rf "${tmp}"
}

prepare() {
	install_packages
	local pkg stamp
	pkg="$(kernel_package)"
	kdir="${cache}/kernel/${pkg}"
	fetch_kernel "${pkg}"
	echo "${pkg}" >"${cache}/kernel.current"
	kver="$(basename "$(echo "${kdir}"/lib/modules/*)")"
	vmlinux="${kdir}/vmlinux"
	[[ -f ${vmlinux} ]] || extract_vmlinux "${kdir}/boot/vmlinuz-${kver}" "${vmlinux}"
	initrd="${kdir}/initrd.gz"
	stamp="$(cat "${root}/hack/vm/init" "${root}/hack/vm/stage2" /bin/busybox "${root}/hack/vm.sh" | sha256sum | cut -d' ' -f1)"
	if [[ ! -f ${initrd} || "$(cat "${initrd}.stamp" 2>/dev/null)" != "${stamp}" ]]; then
		build_initrd "${initrd}"
		echo "${stamp}" >"${initrd}.stamp"
	fi
}

# Preparing the cache is serialized between concurrent runs.
exec 9>"${cache}/.lock"
flock 9
prepare
flock -u 9

out="${VM_OUT:-${cache}/out}"
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"
ctl="$(mktemp -d "${cache}/.run.XXXXXX")"
trap 'rm -rf "${ctl}"' EXIT

# The command: the host's exported environment, working directory and
# arguments, run by bash in the guest.
export -p | grep -vE '^declare -[a-zA-Z-]* (BASH[A-Z_]*|EUID|HOSTNAME|OLDPWD|PPID|PWD|SHELLOPTS|SHLVL|UID|_)(=|$)' >"${ctl}/env" || true
{
	echo 'source /kpng-vm/ctl/env 2>/dev/null'
	printf 'export VM_OUT=%q\n' "${out}"
	if [[ -n ${VM_MODULES:-} ]]; then
		printf 'modprobe -a %s || exit 125\n' "${VM_MODULES}"
	fi
	printf 'cd -- %q || exit 125\n' "${PWD}"
	printf 'exec'
	printf ' %q' "$@"
	printf '\n'
} >"${ctl}/cmd.bash"
echo "${out}" >"${ctl}/out"

# no_timer_check: under emulation on a loaded host the kernel's check of
# the IO-APIC timer can fail, and it panics ("IO-APIC + timer doesn't
# work!"); mitigations=off: nothing to protect in a throwaway test VM, and
# less to emulate.
qemu=(
	qemu-system-x86_64 -accel tcg -cpu max -m "${VM_MEM:-2G}" -smp "${VM_CPUS:-2}"
	-nodefaults -no-reboot -display none -monitor none
	-serial stdio -serial "file:${ctl}/console.log"
	-kernel "${vmlinux}" -initrd "${initrd}"
	-append "console=ttyS1 loglevel=${VM_LOGLEVEL:-4} panic=-1 mitigations=off no_timer_check kpng.modules=${kdir}/lib/modules/${kver} kpng.kver=${kver}"
	-fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
	-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
	-fsdev "local,id=ctl,path=${ctl},security_model=none"
	-device virtio-9p-pci,fsdev=ctl,mount_tag=ctl
	-fsdev "local,id=out,path=${out},security_model=none,multidevs=remap"
	-device virtio-9p-pci,fsdev=out,mount_tag=out
)
if [[ -n ${VM_CONSOLE:-} ]]; then
	trap 'cp "${ctl}/console.log" "${VM_CONSOLE}" 2>/dev/null; rm -rf "${ctl}"' EXIT
fi
if [[ -n ${VM_TIMEOUT:-} ]]; then
	qemu=(timeout "${VM_TIMEOUT}" "${qemu[@]}")
fi
# qemu runs in the background so that a signal to this script (a test
# binary's timeout, Ctrl-C) ends the VM too, rather than orphaning it.
"${qemu[@]}" </dev/null &
qpid=$!
trap 'kill "${qpid}" 2>/dev/null; wait "${qpid}"; exit 143' TERM INT HUP
status=0
wait "${qpid}" || status=$?
trap - TERM INT HUP
if [[ ! -s ${ctl}/rc ]]; then
	tail -n 40 "${ctl}/console.log" >&2 || true
	die "the VM ended without the command's exit status (qemu: ${status})"
fi
exit "$(cat "${ctl}/rc")"
