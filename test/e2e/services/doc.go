// Package services is kpng's real-packet service suite: for every backend
// under test, it builds a netlab cluster, runs the backend in each node as
// users run it (`kpng file --input STATE to-local --node-name N to-<backend>`),
// states Services and EndpointSlices in the file source's state file, and
// asserts what clients observe: which pod answered, which source address it
// saw, and whether an attempt was answered, refused or dropped. The
// expectations are upstream kube-proxy's behaviour; a backend that cannot do
// something says so in its README, and its test still fails.
//
// # Running
//
// As root, with the e2e build tag:
//
//	go test -tags e2e ./test/e2e/services/
//
// KPNG_E2E_BACKENDS selects the backends, comma-separated (default: every
// backend the kpng binary offers as a to-local sub-command). A backend that
// hooks sockets by cgroup (ebpf) gets labs with a cgroup v2 per node
// (netlab.Spec.Cgroups), never the machine's root. Where a backend differs
// from the nftables expectation, on purpose or as a documented gap, the
// test expects what it does instead and says why (differences_test.go;
// listed in docs/<backend>.md). Two reference
// backends run upstream kube-proxy (hack/install-test-deps.sh builds it into
// .cache/bin) fed from a real kube-apiserver that mirrors the state file:
// "kube-proxy-nftables" and "kube-proxy-iptables". They prove the suite
// itself: what it asserts is what kube-proxy does.
//
//	KPNG_E2E_BACKENDS=nft,kube-proxy-nftables go test -tags e2e ./test/e2e/services/
package services
