// Module image assembles kpng's OCI image (hack/image.sh) with
// go-containerregistry, from the kpng binary and Debian packages, pulling
// nothing from any container registry.
//
// It is a separate module so that go-containerregistry stays out of the kpng
// library's go.mod.
module github.com/kpng/kpng/hack/image

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
