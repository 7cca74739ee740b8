package services

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// differences are the cases where a kpng backend does not do what the
// nftables expectation of this suite says, by backend and case: the
// backend's design (kind "by design"), or a gap its docs list as not done
// yet (kind "not done yet"). A test asks [differs] at each such case and
// then expects what the backend does instead, explicitly: the case still
// runs, and a change of behaviour either way fails it. Each case is listed,
// by its id in backquotes, in docs/<backend>.md's differences table
// (TestDifferencesDocumented).
var differences = map[string]map[string]difference{
	"ebpf": {
		"unknown-port": {byDesign,
			"the socket programs rewrite the view's frontends only: another port of a cluster IP is no frontend, so the connection leaves as addressed (in this lab, to the node's gateway, which drops it), as in kube-proxy's iptables mode"},
		"no-endpoints-from-outside": {notDoneYet,
			"from outside, an external or load-balancer IP of a Service without endpoints is dropped by the tc program, not rejected: the client times out (from the node it is refused)"},
		"source-ranges-from-node": {byDesign,
			"loadBalancerSourceRanges filters packets from outside (tc); a connection from the node or its pods is rewritten at connect(), before the kernel picked its source address, so it is not filtered and reaches the endpoint"},
		"source-ranges-node-exception": {byDesign,
			"the node reaches its load-balancer IP, but its connection is rewritten before routing and leaves from the node's address towards the endpoint, not from the VIP held on lo; the ranges are not checked from the node (source-ranges-from-node)"},
		"hairpin": {byDesign,
			"nothing is NAT-ed: a pod reaching itself through its Service connects to itself, and sees its own address"},
		"udp-socket-destroyed": {byDesign,
			"a connected UDP socket was connected to its endpoint itself (the address rewritten at connect()); when the endpoint stops serving, the socket is destroyed (bpf_sock_destroy): the client sees ECONNABORTED, then EDESTADDRREQ, and a new socket reaches a serving endpoint, where kube-proxy deletes the conntrack entry and the same socket's next datagram does"},
		"masquerade-all": {byDesign,
			"to-ebpf has no --masquerade-all: connections that start on the node or its pods are never NAT-ed, so the endpoint sees the pod's own address"},
		"detect-local-mode": {byDesign,
			"to-ebpf has no --detect-local-mode: every connection it rewrites starts on the node or its pods (the cgroup's sockets), so all of it is local traffic: never masqueraded (the node's source is its address on the route to the endpoint, the bridge's for a pod of the node, as the masquerading backends give) and short-circuited to the cluster set for externalTrafficPolicy Local"},
		"repair": {byDesign,
			"to-ebpf writes BPF maps, not firewall rules, and the kernel does not notify a change of a map: entries deleted behind its back are repaired by the periodic sync (--sync-period), which reads the services map back"},
	},
	"ipvs": {
		"affinity-timeout": {byDesign,
			"client-IP affinity is IPVS persistence, whose template lives as long as a connection it placed, TIME_WAIT's 2 minutes included: a client that keeps connecting stays on its endpoint past a shorter timeout, as in kube-proxy's ipvs mode (kubernetes/kubernetes#89358; upstream's e2e skips its affinity-timeout tests for ipvs)"},
		"node-source-without-detection": {byDesign,
			"without local-traffic detection the node's own connection to a cluster IP leaves from that cluster IP (kube-ipvs0 holds it, so the kernel picks it as the source), which an endpoint on another node could not answer; as kube-proxy's ipvs mode, to-ipvs masquerades it (a cluster IP as source, a service port as destination), so the endpoint sees the node's address towards it"},
		"no-short-circuit": {byDesign,
			"IPVS picks real servers by virtual server, not by source: a pod's connection to an external or load-balancer IP of an externalTrafficPolicy Local Service gets the node's local endpoints, not the cluster's, so without local endpoints it is dropped (the view's Local set is empty), as kube-proxy's ipvs mode has no such short-circuit either (its empty virtual server refuses)"},
		"repair": {byDesign,
			"IPVS and ipsets send no notification of a change, so a damage is repaired by the periodic sync (--sync-period, 2 s in the test), which checks IPVS, kube-ipvs0's addresses, the ipsets' sizes and the iptables rules cheaply; kube-ipvs0's deletion is watched and repaired at once. kube-proxy's ipvs mode also repairs at its periodic sync"},
	},
}

type difference struct {
	kind string
	why  string
}

const (
	byDesign   = "by design"
	notDoneYet = "not done yet"
)

// differs reports whether backend b differs from this suite's nftables
// expectation at case id, and then logs why: the caller expects what b does
// instead. A kpng backend fed by the kube source ("kube-ebpf") differs as
// the backend does.
func differs(t *testing.T, b netlab.Backend, id string) bool {
	t.Helper()
	name := strings.TrimPrefix(b.Name(), "kube-")
	d, ok := differences[name][id]
	if ok {
		t.Logf("%s differs from the nftables expectation (%s, `%s` in docs/%s.md): %s", b.Name(), d.kind, id, name, d.why)
	}
	return ok
}

// TestDifferencesDocumented: every case where a backend differs is in its
// docs' differences, by id.
func TestDifferencesDocumented(t *testing.T) {
	for _, backend := range slices.Sorted(maps.Keys(differences)) {
		doc := filepath.Join("..", "..", "..", "docs", backend+".md")
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range slices.Sorted(maps.Keys(differences[backend])) {
			if !strings.Contains(string(b), "`"+id+"`") {
				t.Errorf("%s: the case `%s` where %s differs is not listed (%s)", doc, id, backend, differences[backend][id].why)
			}
		}
	}
}
