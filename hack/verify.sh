#!/usr/bin/env bash
# verify.sh checks that the committed generated code matches the .proto files.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/generate.sh
if ! git diff --exit-code --stat -- api; then
	echo "verify.sh: generated code in api/ is stale: run make generate and commit" >&2
	exit 1
fi
