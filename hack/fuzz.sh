#!/usr/bin/env bash
# fuzz.sh runs a fuzzing campaign (docs/fuzzing.md: the targets, the last
# campaign and what it found) on every fuzz target of the kpng module
# (the config loaders, the cluster converters and state-file parser, the
# gRPC decoders of server and client, the parsers of kernel listings, ...),
# one after the other, each for the same time:
#
#   hack/fuzz.sh                    # 10 minutes each
#   hack/fuzz.sh -t 2m              # 2 minutes each
#   hack/fuzz.sh -t 1m '^FuzzWatch$'  # the targets whose name matches
#
# A failing input is written by go test under the package's
# testdata/fuzz/<target>/; fix what it shows and commit the file beside the
# fix, so that `go test` replays it from then on. The script goes on with the
# other targets and exits non-zero if any failed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

fuzztime=10m
while [[ $# -gt 0 ]]; do
	case $1 in
	-t) fuzztime=$2; shift 2 ;;
	-h | --help) sed -n '2,15p' "$0"; exit 0 ;;
	-*) echo "usage: hack/fuzz.sh [-t DURATION] [REGEXP]" >&2; exit 2 ;;
	*) break ;;
	esac
done
filter=${1:-.}

# Every "func FuzzX(f *testing.F)" of the module, as "package-dir FuzzX"
# (hack/ holds other modules; .cache is not source).
mapfile -t targets < <(git ls-files '*_test.go' | grep -v '^hack/' |
	xargs grep -h -o -H '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' |
	sed -E 's|^(.*)/[^/]*_test.go:func (Fuzz[A-Za-z0-9_]*)\(.*|./\1 \2|' |
	awk -v re="${filter}" '$2 ~ re' | sort -u)
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "fuzz.sh: no fuzz target matches ${filter}" >&2
	exit 1
fi

failed=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"${t}"
	printf '\n=== %s %s for %s (%s)\n' "${pkg}" "${name}" "${fuzztime}" "$(date -u +%H:%M:%S)"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "${fuzztime}" "${pkg}" 2>&1 | grep -v '^[IWE][0-9]\{4\} '; then
		failed+=("${pkg} ${name}")
	fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
	printf '\nfuzz.sh: failed:\n' >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, ${fuzztime} each, no failure"
