// Package apiserver runs a real etcd and a real kube-apiserver on loopback for
// kpng's integration tests.
//
// [Start] launches etcd (Debian's etcd-server) and kube-apiserver (built from
// the Kubernetes module pinned in hack/tools) on free 127.0.0.1 ports, with a
// fresh data directory, and returns a [Server] whose client acts as a cluster
// admin. Everything is stopped and removed when the test ends.
//
// The binaries come from hack/install-test-deps.sh, which builds kube-apiserver
// into .cache/bin at the repository root; the environment variables
// KPNG_KUBE_APISERVER and KPNG_ETCD override their paths. When a binary is
// missing, Start fails the test rather than skipping it, so that CI cannot
// pass without running these tests.
//
// Test files that call Start carry the build tag "integration", so that
// `go test ./...` runs only unit tests and needs no binaries:
//
//	./hack/install-test-deps.sh
//	go test -tags integration ./test/integration/...
//
// The cluster is dual-stack: Services get cluster IPs from 10.96.0.0/16 and
// fd00:10:96::/112. Authorization is RBAC (the admin is in system:masters),
// so that tests can check what a given identity may do, and only the
// NamespaceLifecycle admission plugin runs.
package apiserver
