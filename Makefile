# Everyday targets. `make test` is what CI runs (see .ci/run).
.PHONY: build test unit generate verify

build:
	go build -o bin/kpng ./cmd/kpng

# Installs what the tests need (Debian packages, the test kube-apiserver) and
# runs every test: unit tests with the race detector, integration and e2e.
test:
	hack/test.sh

unit:
	go test -race ./...

generate:
	hack/generate.sh

verify:
	hack/verify.sh
