//go:build ignore

// Socket-level load balancing of Services: cgroup programs that rewrite a
// Service address to one of its endpoints when a socket connects (TCP, and
// connected UDP) or sends a datagram (unconnected UDP), and rewrite the
// endpoint back to the Service address when the socket asks who its peer is
// (getpeername) or where a datagram came from (recvmsg). Established traffic
// never meets a NAT: the socket talks to the endpoint from the start. When
// a socket is closed (sock_release), the entries it left are deleted.
//
// IPv4 addresses are kept as IPv4-mapped IPv6 addresses (::ffff:a.b.c.d),
// so that both families share one set of maps.
//
// The maps are written by kpng (backends/ebpf): see its README.md for how a
// change is ordered so that a Service never has a moment without endpoints.

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/errno.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "maps.h"

char __license[] SEC("license") = "Dual BSD/GPL";

// The reverse translation of one socket towards one endpoint.
struct rev_key {
	__u64 cookie; // the socket's cookie
	struct endpoint ep;
	__u32 pad;
};

// The affinity of one client (its network namespace: a pod) to one
// endpoint of one Service port.
struct affinity_key {
	__u64 netns;
	__u32 affinity_id;
	__u32 pad;
};

struct affinity_val {
	struct endpoint ep;
	__u32 pad;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rev_key);
	__type(value, struct endpoint);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_revnat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct affinity_key);
	__type(value, struct affinity_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_affinity SEC(".maps");

static __always_inline void key4(struct svc_key *k, struct bpf_sock_addr *ctx)
{
	k->addr[0] = 0;
	k->addr[1] = 0;
	k->addr[2] = bpf_htonl(0x0000ffff);
	k->addr[3] = ctx->user_ip4;
	k->port = (__u16)ctx->user_port;
	k->proto = (__u8)ctx->protocol;
	k->scope = SCOPE_NODE;
}

static __always_inline void key6(struct svc_key *k, struct bpf_sock_addr *ctx)
{
	k->addr[0] = ctx->user_ip6[0];
	k->addr[1] = ctx->user_ip6[1];
	k->addr[2] = ctx->user_ip6[2];
	k->addr[3] = ctx->user_ip6[3];
	k->port = (__u16)ctx->user_port;
	k->proto = (__u8)ctx->protocol;
	k->scope = SCOPE_NODE;
}

// A datagram flow: one unconnected UDP socket sending to one Service. Its
// datagrams keep going to the endpoint of the first one, as kube-proxy's
// conntrack entry keeps them, while the Service's set is unchanged.
struct flow_key {
	__u64 cookie;
	struct svc_key svc;
	__u32 pad;
};

struct flow_val {
	__u32 set;
	__u32 slot;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct flow_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_flows SEC(".maps");

// The pairs (Service, endpoint) whose entries in kpng_flows and kpng_revnat
// an unconnected UDP socket's datagrams left: socket storage, freed with
// the socket, read by sock_release to delete those entries. A connected
// socket needs none: its one reverse entry is keyed by its destination,
// which sock_release reads. A socket that sends to more than SOCK_FLOWS
// pairs leaves the others to the LRU.
#define SOCK_FLOWS 4

struct sock_flow {
	struct svc_key svc;
	struct endpoint ep;
};

struct sock_flows {
	struct sock_flow f[SOCK_FLOWS];
	__u32 n; // pairs of f in use
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_flows);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_sock_flows SEC(".maps");

// pick chooses the slot of a Service's endpoint: the client's affinity if
// it has one that is fresh and still in the set, or a random slot.
static __always_inline __u32 pick(struct bpf_sock_addr *ctx, struct svc_val *svc)
{
	struct affinity_key ak = {};
	__u64 now = 0;
	__u32 slot;

	if (svc->affinity_sec) {
		ak.netns = bpf_get_netns_cookie(ctx);
		ak.affinity_id = svc->affinity_id;
		now = bpf_ktime_get_ns();
		struct affinity_val *av = bpf_map_lookup_elem(&kpng_affinity, &ak);
		if (av && now - av->last_ns <= (__u64)svc->affinity_sec * 1000000000ULL) {
			struct member_key mk = {};
			mk.set = svc->set;
			mk.ep = av->ep;
			__u32 *member = bpf_map_lookup_elem(&kpng_members, &mk);
			if (member) {
				av->last_ns = now;
				return *member;
			}
		}
	}

	slot = bpf_get_prandom_u32() % svc->count;
	if (svc->affinity_sec) {
		struct slot_key sk = {.set = svc->set, .slot = slot};
		struct endpoint *ep = bpf_map_lookup_elem(&kpng_slots, &sk);
		if (ep) {
			struct affinity_val av = {};
			av.ep = *ep;
			av.last_ns = now;
			bpf_map_update_elem(&kpng_affinity, &ak, &av, BPF_ANY);
		}
	}
	return slot;
}

// lookup_endpoint returns the endpoint for a socket dialling Service k:
// for a datagram flow, the endpoint its first datagram went to. It sets
// *picked when it wrote the flow's entry (a new flow, or one whose set
// changed).
static __always_inline struct endpoint *lookup_endpoint(struct bpf_sock_addr *ctx, struct svc_key *k, struct svc_val *svc, int flow, int *picked)
{
	struct flow_key fk = {};
	struct slot_key sk = {.set = svc->set};

	if (flow) {
		fk.cookie = bpf_get_socket_cookie(ctx);
		fk.svc = *k;
		struct flow_val *fv = bpf_map_lookup_elem(&kpng_flows, &fk);
		if (fv && fv->set == svc->set && fv->slot < svc->count) {
			sk.slot = fv->slot;
			struct endpoint *ep = bpf_map_lookup_elem(&kpng_slots, &sk);
			if (ep)
				return ep;
		}
	}
	sk.slot = pick(ctx, svc);
	if (flow) {
		struct flow_val fv = {.set = svc->set, .slot = sk.slot};
		bpf_map_update_elem(&kpng_flows, &fk, &fv, BPF_ANY);
		*picked = 1;
	}
	return bpf_map_lookup_elem(&kpng_slots, &sk);
}

// translate looks the dialled address up; on a Service it writes the
// endpoint chosen into *out and returns 1, returns 0 for any other address,
// and -1 when the connection must be refused (with the errno set). A
// datagram flow's entry written sets *picked.
static __always_inline int translate(struct bpf_sock_addr *ctx, struct svc_key *k, struct endpoint *out, int flow, int *picked)
{
	struct svc_val *svc = bpf_map_lookup_elem(&kpng_services, k);
	if (!svc)
		return 0;
	if (svc->count == 0) {
		bpf_set_retval((svc->flags & SVC_F_DROP) ? -ETIMEDOUT : -ECONNREFUSED);
		return -1;
	}
	struct endpoint *ep = lookup_endpoint(ctx, k, svc, flow, picked);
	if (!ep) {
		// The set was replaced between the two lookups (kpng writes the
		// new set, switches the Service, then deletes the old set): the
		// Service entry now names the new set.
		svc = bpf_map_lookup_elem(&kpng_services, k);
		if (!svc || svc->count == 0) {
			bpf_set_retval(-ECONNREFUSED);
			return -1;
		}
		ep = lookup_endpoint(ctx, k, svc, flow, picked);
		if (!ep) {
			bpf_set_retval(-ECONNREFUSED);
			return -1;
		}
	}
	*out = *ep;
	return 1;
}

// remember records the reverse translation of this socket towards ep.
static __always_inline void remember(struct bpf_sock_addr *ctx, struct svc_key *k, struct endpoint *ep)
{
	struct rev_key rk = {};
	struct endpoint vip = {};

	rk.cookie = bpf_get_socket_cookie(ctx);
	rk.ep = *ep;
	vip.addr[0] = k->addr[0];
	vip.addr[1] = k->addr[1];
	vip.addr[2] = k->addr[2];
	vip.addr[3] = k->addr[3];
	vip.port = k->port;
	bpf_map_update_elem(&kpng_revnat, &rk, &vip, BPF_ANY);
}

static __always_inline int same_flow(struct sock_flow *f, struct svc_key *k, struct endpoint *ep)
{
	return f->svc.addr[0] == k->addr[0] && f->svc.addr[1] == k->addr[1] &&
	       f->svc.addr[2] == k->addr[2] && f->svc.addr[3] == k->addr[3] &&
	       f->svc.port == k->port && f->svc.proto == k->proto && f->svc.scope == k->scope &&
	       f->ep.addr[0] == ep->addr[0] && f->ep.addr[1] == ep->addr[1] &&
	       f->ep.addr[2] == ep->addr[2] && f->ep.addr[3] == ep->addr[3] &&
	       f->ep.port == ep->port;
}

// note_flow records in the socket's storage that its datagrams to Service
// k go to ep (entries in kpng_flows and kpng_revnat), unless it holds the
// pair already. Only when the flow's entry was written: its datagrams
// that follow add no pair. Two threads sending at once on one socket may
// both take a place; a pair lost so is left to the LRU.
static __always_inline void note_flow(struct bpf_sock_addr *ctx, struct svc_key *k, struct endpoint *ep)
{
	struct sock_flows *sf = bpf_sk_storage_get(&kpng_sock_flows, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!sf)
		return;
	__u32 n = sf->n;
	for (__u32 i = 0; i < SOCK_FLOWS; i++) {
		if (i >= n)
			break;
		if (same_flow(&sf->f[i], k, ep))
			return;
	}
	if (n >= SOCK_FLOWS)
		return;
	sf->f[n].svc = *k;
	sf->f[n].ep = *ep;
	sf->n = n + 1;
}

static __always_inline int is_v4mapped(struct endpoint *ep)
{
	return ep->addr[0] == 0 && ep->addr[1] == 0 && ep->addr[2] == bpf_htonl(0x0000ffff);
}

static __always_inline int forward4(struct bpf_sock_addr *ctx, int flow)
{
	struct svc_key k;
	struct endpoint ep = {};
	int picked = 0;

	key4(&k, ctx);
	int r = translate(ctx, &k, &ep, flow, &picked);
	if (r < 0)
		return 0;
	if (r == 0 || !is_v4mapped(&ep))
		return 1;
	ctx->user_ip4 = ep.addr[3];
	ctx->user_port = ep.port;
	remember(ctx, &k, &ep);
	if (picked)
		note_flow(ctx, &k, &ep);
	return 1;
}

static __always_inline int forward6(struct bpf_sock_addr *ctx, int flow)
{
	struct svc_key k;
	struct endpoint ep = {};
	int picked = 0;

	key6(&k, ctx);
	int r = translate(ctx, &k, &ep, flow, &picked);
	if (r < 0)
		return 0;
	if (r == 0)
		return 1;
	ctx->user_ip6[0] = ep.addr[0];
	ctx->user_ip6[1] = ep.addr[1];
	ctx->user_ip6[2] = ep.addr[2];
	ctx->user_ip6[3] = ep.addr[3];
	ctx->user_port = ep.port;
	remember(ctx, &k, &ep);
	if (picked)
		note_flow(ctx, &k, &ep);
	return 1;
}

static __always_inline void reverse(struct bpf_sock_addr *ctx, struct endpoint *peer, int v4)
{
	struct rev_key rk = {};

	rk.cookie = bpf_get_socket_cookie(ctx);
	rk.ep = *peer;
	struct endpoint *vip = bpf_map_lookup_elem(&kpng_revnat, &rk);
	if (!vip)
		return;
	if (v4) {
		ctx->user_ip4 = vip->addr[3];
	} else {
		ctx->user_ip6[0] = vip->addr[0];
		ctx->user_ip6[1] = vip->addr[1];
		ctx->user_ip6[2] = vip->addr[2];
		ctx->user_ip6[3] = vip->addr[3];
	}
	ctx->user_port = vip->port;
}

static __always_inline void reverse4(struct bpf_sock_addr *ctx)
{
	struct endpoint peer = {};

	peer.addr[2] = bpf_htonl(0x0000ffff);
	peer.addr[3] = ctx->user_ip4;
	peer.port = (__u16)ctx->user_port;
	reverse(ctx, &peer, 1);
}

static __always_inline void reverse6(struct bpf_sock_addr *ctx)
{
	struct endpoint peer = {};

	peer.addr[0] = ctx->user_ip6[0];
	peer.addr[1] = ctx->user_ip6[1];
	peer.addr[2] = ctx->user_ip6[2];
	peer.addr[3] = ctx->user_ip6[3];
	peer.port = (__u16)ctx->user_port;
	reverse(ctx, &peer, 0);
}

SEC("cgroup/connect4")
int kpng_connect4(struct bpf_sock_addr *ctx)
{
	return forward4(ctx, 0);
}

SEC("cgroup/sendmsg4")
int kpng_sendmsg4(struct bpf_sock_addr *ctx)
{
	return forward4(ctx, 1);
}

SEC("cgroup/recvmsg4")
int kpng_recvmsg4(struct bpf_sock_addr *ctx)
{
	reverse4(ctx);
	return 1;
}

SEC("cgroup/getpeername4")
int kpng_getpeername4(struct bpf_sock_addr *ctx)
{
	reverse4(ctx);
	return 1;
}

SEC("cgroup/connect6")
int kpng_connect6(struct bpf_sock_addr *ctx)
{
	return forward6(ctx, 0);
}

SEC("cgroup/sendmsg6")
int kpng_sendmsg6(struct bpf_sock_addr *ctx)
{
	return forward6(ctx, 1);
}

SEC("cgroup/recvmsg6")
int kpng_recvmsg6(struct bpf_sock_addr *ctx)
{
	reverse6(ctx);
	return 1;
}

SEC("cgroup/getpeername6")
int kpng_getpeername6(struct bpf_sock_addr *ctx)
{
	reverse6(ctx);
	return 1;
}

// A socket of the cgroup is closed (its last file reference, before the
// protocol's close: a TCP socket still has its peer): delete the entries
// its connect or its datagrams left, so that kpng_revnat and kpng_flows
// hold the open sockets' only. Without it they fill with closed sockets'
// entries, every further translation pays an eviction, and an idle
// socket's entry (a DNS client's connected UDP socket) can be evicted by
// others' churn, after which recvmsg shows the endpoint.
SEC("cgroup/sock_release")
int kpng_sock_release(struct bpf_sock *ctx)
{
	struct rev_key rk = {};
	__u16 port = ctx->dst_port; // network order; 0: not connected
	struct sock_flows *sf = bpf_sk_storage_get(&kpng_sock_flows, ctx, 0, 0);

	if (!port && !sf)
		return 1;
	rk.cookie = bpf_get_socket_cookie(ctx);
	if (port) {
		// A connected socket: its reverse entry is towards its
		// destination (an IPv4 one as ::ffff:a.b.c.d, as the socket
		// programs key it; an AF_INET6 socket's IPv4 peer is mapped so
		// already). dst_ip4 is read as volatile: otherwise clang reads it
		// and dst_ip6[3] through one computed context pointer, which the
		// verifier refuses.
		switch (ctx->family) {
		case 2: // AF_INET
			rk.ep.addr[2] = bpf_htonl(0x0000ffff);
			rk.ep.addr[3] = *(volatile __u32 *)&ctx->dst_ip4;
			break;
		case 10: // AF_INET6
			rk.ep.addr[0] = ctx->dst_ip6[0];
			rk.ep.addr[1] = ctx->dst_ip6[1];
			rk.ep.addr[2] = ctx->dst_ip6[2];
			rk.ep.addr[3] = ctx->dst_ip6[3];
			break;
		default:
			port = 0;
		}
		if (port) {
			rk.ep.port = port;
			bpf_map_delete_elem(&kpng_revnat, &rk);
		}
	}
	if (sf) {
		struct flow_key fk = {};

		fk.cookie = rk.cookie;
		for (__u32 i = 0; i < SOCK_FLOWS; i++) {
			if (i >= sf->n)
				break;
			fk.svc = sf->f[i].svc;
			bpf_map_delete_elem(&kpng_flows, &fk);
			rk.ep = sf->f[i].ep;
			bpf_map_delete_elem(&kpng_revnat, &rk);
		}
	}
	return 1;
}
