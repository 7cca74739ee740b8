//go:build ignore

// Socket-level load balancing of Services: cgroup programs that rewrite a
// Service address to one of its endpoints when a socket connects (TCP, and
// connected UDP) or sends a datagram (unconnected UDP), and rewrite the
// endpoint back to the Service address when the socket asks who its peer is
// (getpeername) or where a datagram came from (recvmsg). Established traffic
// never meets a NAT: the socket talks to the endpoint from the start.
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
// for a datagram flow, the endpoint its first datagram went to.
static __always_inline struct endpoint *lookup_endpoint(struct bpf_sock_addr *ctx, struct svc_key *k, struct svc_val *svc, int flow)
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
	}
	return bpf_map_lookup_elem(&kpng_slots, &sk);
}

// translate looks the dialled address up; on a Service it writes the
// endpoint chosen into *out and returns 1, returns 0 for any other address,
// and -1 when the connection must be refused (with the errno set).
static __always_inline int translate(struct bpf_sock_addr *ctx, struct svc_key *k, struct endpoint *out, int flow)
{
	struct svc_val *svc = bpf_map_lookup_elem(&kpng_services, k);
	if (!svc)
		return 0;
	if (svc->count == 0) {
		bpf_set_retval((svc->flags & SVC_F_DROP) ? -ETIMEDOUT : -ECONNREFUSED);
		return -1;
	}
	struct endpoint *ep = lookup_endpoint(ctx, k, svc, flow);
	if (!ep) {
		// The set was replaced between the two lookups (kpng writes the
		// new set, switches the Service, then deletes the old set): the
		// Service entry now names the new set.
		svc = bpf_map_lookup_elem(&kpng_services, k);
		if (!svc || svc->count == 0) {
			bpf_set_retval(-ECONNREFUSED);
			return -1;
		}
		ep = lookup_endpoint(ctx, k, svc, flow);
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

static __always_inline int is_v4mapped(struct endpoint *ep)
{
	return ep->addr[0] == 0 && ep->addr[1] == 0 && ep->addr[2] == bpf_htonl(0x0000ffff);
}

static __always_inline int forward4(struct bpf_sock_addr *ctx, int flow)
{
	struct svc_key k;
	struct endpoint ep = {};

	key4(&k, ctx);
	int r = translate(ctx, &k, &ep, flow);
	if (r < 0)
		return 0;
	if (r == 0 || !is_v4mapped(&ep))
		return 1;
	ctx->user_ip4 = ep.addr[3];
	ctx->user_port = ep.port;
	remember(ctx, &k, &ep);
	return 1;
}

static __always_inline int forward6(struct bpf_sock_addr *ctx, int flow)
{
	struct svc_key k;
	struct endpoint ep = {};

	key6(&k, ctx);
	int r = translate(ctx, &k, &ep, flow);
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
