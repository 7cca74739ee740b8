// Package kube tests kpng's Kubernetes API source (source/kube) and the
// `kpng kube` command against a real etcd and kube-apiserver
// (test/integration/apiserver). The tests carry the build tag
// "integration":
//
//	./hack/install-test-deps.sh
//	go test -tags integration ./test/integration/kube/
//
// They assert what a backend would receive: the node-local view through
// local.Feed, each delivery with its revision and change list. kpng
// runs as deploy/rbac.yaml's ServiceAccount, with a token the API server
// issued, so that the tests also prove those permissions are enough.
//
// BenchmarkKubeStartup (run by hack/bench-kube-source.sh) times `kpng kube`
// from start to its first complete view over a preloaded cluster.
package kube
