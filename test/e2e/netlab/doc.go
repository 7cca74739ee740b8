// Package netlab is kpng's real-packet test harness: it builds a small,
// dual-stack cluster network out of Linux network namespaces, runs tiny echo
// servers in "pod" namespaces, and sends real TCP and UDP traffic from pods,
// nodes and an external client, reporting what a user would observe: which
// pod answered, which source address that pod saw, or whether the attempt was
// refused or timed out.
//
// It knows nothing about any dataplane. A backend's e2e suite (nftables,
// iptables, eBPF, ...) starts its proxy inside a [Node] through the [Backend]
// interface, programs services, and asserts with [Host.TCP], [Host.UDP] and
// [Spread]. Every suite is written once and run for every backend.
//
// # Topology
//
// [New] builds, for a [Spec] (see [DefaultSpec]):
//
//	                 lan namespace: bridge lan0 192.168.77.1/24 fd00:77::1/64
//	          ┌──────────────────────────┼──────────────────────────┐
//	node-1 eth0 192.168.77.10      node-2 eth0 192.168.77.11    external eth0 192.168.77.100
//	       fd00:77::10                    fd00:77::11                 fd00:77::100
//	node-1 bridge kpbr0 10.244.1.1/24    node-2 bridge kpbr0 10.244.2.1/24
//	       fd00:10:244:1::1/64                  fd00:10:244:2::1/64
//	  pod-a 10.244.1.10  pod-b 10.244.1.11        pod-c 10.244.2.10
//	  fd00:10:244:1::10  fd00:10:244:1::11        fd00:10:244:2::10
//
// Node i (from 0) has node IP 192.168.77.(10+i) and pod CIDR 10.244.(i+1).0/24;
// its pods get .10, .11, ... Every node routes every other node's pod CIDRs via
// that node's IP, and has a default route to the lan bridge (192.168.77.1), so
// that a host-network client on the node can connect to a service VIP that has
// no route of its own (the kernel needs a route before the OUTPUT hook runs).
// The lan namespace does not forward, so anything not handled by a node's
// dataplane stops there.
//
// Nodes forward IPv4 and IPv6, use loose reverse-path filtering (rp_filter=2),
// and, when the kernel has br_netfilter (see [Node.BrNetfilter]), pass bridged
// traffic through the ip/ip6 netfilter hooks (bridge-nf-call-iptables=1), as
// kubelet and CNI plugins expect. Bridge ports have hairpin mode on, so a pod
// can reach itself through a service. route_localnet is left at 0: a backend
// that wants localhost NodePorts sets it itself, as kube-proxy does.
// IPv6 duplicate address detection is off, so addresses are usable at once.
//
// No namespace of a lab has any link to the root namespace or to any other
// namespace outside the lab: no packet can leave it, and the root namespace's
// interfaces, routes and firewall are never touched.
//
// # Cgroups, for dataplanes that hook sockets
//
// With [Spec].Cgroups, the lab mounts the cgroup v2 hierarchy on a folder of
// its own and gives each node a cgroup ([Node.Cgroup], a strict descendant
// of the root, never the root) with a child for the node's own clients and
// one per pod, and a BPF filesystem ([Node.BPFFS]) for pins. The clients of
// a node or pod ([Host.Dial], [Host.OpenStream], [Host.OpenUDP],
// [Host.HTTPGet]) then open their sockets in a process born in its cgroup
// and namespace (the test binary run again, which hands each socket over),
// because a socket belongs to the cgroup it was created in: a dataplane
// attached to [Node.Cgroup] (to-ebpf) sees the node's and its pods' clients,
// and not the external client or the test process. Teardown stops those
// processes, unmounts the BPF filesystems (deleting the pins), removes the
// cgroups and unmounts the hierarchy; all are named after the run, and a
// lab with cgroups sweeps what dead runs left.
//
// # Namespaces and cleanup
//
// Namespaces are named "kpnl-<run>-<lab>-<role>" (see [Prefix]): <run> is
// random per test process, so parallel runs never collide. [New] registers a
// t.Cleanup that, if the test failed, logs each node's nft ruleset,
// iptables-save, conntrack table, addresses and routes, and the output of
// every process started in the lab, then stops those processes, closes the
// servers and deletes the namespaces. Each test process holds a lock file
// under /run/kpng-netlab; [New] first removes namespaces of earlier runs whose
// lock is no longer held (crashed or killed runs), never those of a live run.
//
// # Running the tests
//
// The tests of this package and of backend e2e suites need root and carry the
// build tag e2e, so that plain "go test ./..." does not need root:
//
//	sudo go test -tags e2e ./test/e2e/...
//
// Run as non-root, they fail with a message saying so rather than skip.
package netlab
