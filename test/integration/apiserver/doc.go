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
// Beyond the admin's client, a Server hands out a kubeconfig for a
// ServiceAccount (ServiceAccountKubeconfig: a token the API server issued,
// with exactly the permissions RBAC grants, such as deploy/rbac.yaml's for
// kpng, applied with Apply), stops and restarts its kube-apiserver
// (StopAPIServer, RestartAPIServer: an outage), and starts peers
// (StartPeer: a second kube-apiserver on the same etcd, through which a
// test changes the cluster while the first is down).
//
// The cluster is dual-stack: Services get cluster IPs from 10.96.0.0/16 and
// fd00:10:96::/112. Authorization is RBAC (the admin is in system:masters),
// so that tests can check what a given identity may do, and only the
// NamespaceLifecycle admission plugin runs.
//
// # etcd 3.4
//
// Debian bookworm's etcd-server is 3.4.23; Kubernetes v1.36 is tested with
// etcd 3.5 and 3.6. kube-apiserver v1.36.3 runs on 3.4.23 without extra
// flags, with one difference a test may notice: etcd 3.4.23 lacks the
// RequestWatchProgress call (3.4.31 and 3.5.13 have it), which kube-apiserver
// detects at start ("RequestWatchProgress feature is not supported"). So
//
//   - a watch-list request (a watch with sendInitialEvents=true, which
//     client-go's informers make by default since v0.35, feature
//     WatchListClient) gets an error event, on which client-go falls back to
//     LIST then WATCH, as it does against any server older than v1.32; and
//   - consistent LISTs are read from etcd rather than the watch cache.
//
// Both are behaviours kpng must handle anyway; turning the WatchList feature
// gate off would change nothing for clients, so it stays on.
package apiserver
