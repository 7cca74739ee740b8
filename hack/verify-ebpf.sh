#!/usr/bin/env bash
# verify-ebpf.sh checks that the committed BPF objects of backends/ebpf (and
# their Go bindings) are what bpf2go makes of the C sources beside them: it
# regenerates them with clang (Debian's clang 14 and libbpf-dev, from
# hack/install-test-deps.sh) and compares. Every bpf/*.c (sock.c, nodeport.c,
# destroy.c) must have its objects committed and its bpf2go line in
# generate.go. The tree is left as it was.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pkg=backends/ebpf
missing=()
for src in "${pkg}"/bpf/*.c; do
	name=$(basename "${src}" .c)
	for f in "${pkg}/${name}_bpfel.go" "${pkg}/${name}_bpfel.o"; do
		git ls-files --error-unmatch "${f}" >/dev/null 2>&1 || missing+=("${f}")
	done
	grep -q "bpf2go .* ${name} bpf/${name}.c " "${pkg}/generate.go" || missing+=("a bpf2go line for bpf/${name}.c in ${pkg}/generate.go")
done
if ((${#missing[@]} > 0)); then
	echo "verify-ebpf.sh: missing ${missing[*]}: add the line, run go generate ./${pkg} and commit" >&2
	exit 1
fi
generated=("${pkg}"/*_bpfel.go "${pkg}"/*_bpfel.o)
for tool in clang llvm-strip; do
	command -v "${tool}" >/dev/null || {
		echo "verify-ebpf.sh: ${tool} is missing: run hack/install-test-deps.sh" >&2
		exit 1
	}
done

saved=$(mktemp -d)
trap 'cp -p "${saved}"/* "${pkg}"/ && rm -rf "${saved}"' EXIT
cp -p "${generated[@]}" "${saved}/"

go generate "./${pkg}"
stale=()
for f in "${generated[@]}"; do
	cmp -s "${f}" "${saved}/$(basename "${f}")" || stale+=("${f}")
done
if ((${#stale[@]} > 0)); then
	echo "verify-ebpf.sh: ${stale[*]} differ from what ${pkg}/bpf/*.c compiles to: run go generate ./${pkg} and commit" >&2
	exit 1
fi
echo "verify-ebpf.sh: the BPF objects match their sources"
