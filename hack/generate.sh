#!/usr/bin/env bash
# Regenerates the Go code of api/*/ from its .proto files.
# protoc comes from Debian's protobuf-compiler; the Go plugins are pinned in
# go.mod's tool block and run through `go tool`, so every machine generates
# the same code.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v protoc >/dev/null; then
  echo "installing protoc (Debian protobuf-compiler)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
for plugin in protoc-gen-go protoc-gen-go-grpc; do
  printf '#!/bin/sh\nexec go tool %s "$@"\n' "$plugin" >"$bin/$plugin"
  chmod +x "$bin/$plugin"
done

for dir in api/*/; do
  protos=("$dir"*.proto)
  [ -e "${protos[0]}" ] || continue
  PATH="$bin:$PATH" protoc -I . \
    --go_out=. --go_opt=module=github.com/kpng/kpng \
    --go-grpc_out=. --go-grpc_opt=module=github.com/kpng/kpng \
    "${protos[@]}"
done
