//go:build ignore

// Services for packets from outside the node (north-south): tcx programs on
// the node's interfaces. A packet to a NodePort on a node address, an
// external IP or a load-balancer IP (a SCOPE_OUTSIDE frontend of
// kpng_services) has its destination rewritten to an endpoint of the
// frontend's set (DNAT) and, under externalTrafficPolicy Cluster
// (SVC_F_MASQ), its source to the node's address towards that endpoint
// (masquerade). A connection's later packets follow its first (kpng_ct),
// and its replies are translated back (kpng_rct) at the ingress of the
// interface they arrive on (masqueraded: they are addressed to the node) or
// at the egress of the one they leave by (not masqueraded: the node routes
// them to the client).
//
// A packet translated at ingress is forwarded by the program (bpf_fib_lookup,
// then bpf_redirect_neigh), not handed to the stack: its source may now be
// one of the node's own addresses (masquerade, or a reply from a NodePort),
// which the stack's input routing drops as a martian.
//
// IPv4 only for now; addresses are kept IPv4-mapped, as in the other maps,
// so that IPv6 can share them.

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "maps.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2

// tcx verdicts (linux/bpf.h's TCX_NEXT and TCX_DROP, which Debian's headers
// lack): a packet that is not kpng's, or that kpng translated, goes on to
// the next program of the interface (a CNI's), or to the stack.
#define ACT_NEXT -1
#define ACT_DROP 2

// The first port masquerade picks when the client's own is taken, and how
// many it tries (the kernel's ip_local_port_range).
#define NAT_PORT_MIN 32768
#define NAT_PORT_SPAN 28232
#define NAT_PORT_TRIES 8

// A packet's addresses and ports, as it travels.
struct tuple {
	__u32 src[4]; // network order; IPv4 as ::ffff:a.b.c.d
	__u32 dst[4];
	__u16 sport; // network order
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

// What a packet of a translated connection is rewritten to.
struct nat {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u32 set; // in kpng_ct: the frontend's set when the connection began
};

// A connection from outside as it arrives (client -> frontend) -> its
// rewrite (-> endpoint, from the client or the node).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tuple);
	__type(value, struct nat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_ct SEC(".maps");

// Its replies as they come from the endpoint -> their rewrite (frontend ->
// client).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tuple);
	__type(value, struct nat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_rct SEC(".maps");

struct pkt {
	struct tuple t;
	__u32 l4_off;   // of the TCP or UDP header
	__u32 csum_off; // of its checksum
};

#define IP_OFF ETH_HLEN

// parse4 reads an IPv4 TCP or UDP packet's tuple; 0 for anything else
// (other protocols, later fragments, non-Ethernet frames).
static __always_inline int parse4(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	__u16 ports[2];

	if ((void *)(ip + 1) > end)
		return 0;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl < 5)
		return 0;
	if (ip->frag_off & bpf_htons(0x1fff)) // no ports in a later fragment
		return 0;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return 0;
	p->t.src[2] = bpf_htonl(0x0000ffff);
	p->t.src[3] = ip->saddr;
	p->t.dst[2] = bpf_htonl(0x0000ffff);
	p->t.dst[3] = ip->daddr;
	p->t.proto = ip->protocol;
	p->l4_off = ETH_HLEN + ip->ihl * 4;
	p->csum_off = p->l4_off + (ip->protocol == IPPROTO_TCP ? 16 : 6);
	if (bpf_skb_load_bytes(skb, p->l4_off, ports, sizeof(ports)))
		return 0;
	p->t.sport = ports[0];
	p->t.dport = ports[1];
	return 1;
}

// rewrite4 rewrites the packet's addresses and ports to n, with the IPv4
// and TCP/UDP checksums updated incrementally (a UDP checksum of 0, none,
// stays 0).
static __always_inline int rewrite4(struct __sk_buff *skb, struct pkt *p, struct nat *n)
{
	__u64 l4f = p->t.proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 o, v;

	o = p->t.src[3];
	v = n->src[3];
	if (o != v) {
		if (bpf_l4_csum_replace(skb, p->csum_off, o, v, l4f | BPF_F_PSEUDO_HDR | 4) ||
		    bpf_l3_csum_replace(skb, IP_OFF + offsetof(struct iphdr, check), o, v, 4) ||
		    bpf_skb_store_bytes(skb, IP_OFF + offsetof(struct iphdr, saddr), &v, 4, 0))
			return -1;
	}
	o = p->t.dst[3];
	v = n->dst[3];
	if (o != v) {
		if (bpf_l4_csum_replace(skb, p->csum_off, o, v, l4f | BPF_F_PSEUDO_HDR | 4) ||
		    bpf_l3_csum_replace(skb, IP_OFF + offsetof(struct iphdr, check), o, v, 4) ||
		    bpf_skb_store_bytes(skb, IP_OFF + offsetof(struct iphdr, daddr), &v, 4, 0))
			return -1;
	}
	if (p->t.sport != n->sport) {
		__u16 port = n->sport;
		if (bpf_l4_csum_replace(skb, p->csum_off, p->t.sport, port, l4f | 2) ||
		    bpf_skb_store_bytes(skb, p->l4_off, &port, 2, 0))
			return -1;
	}
	if (p->t.dport != n->dport) {
		__u16 port = n->dport;
		if (bpf_l4_csum_replace(skb, p->csum_off, p->t.dport, port, l4f | 2) ||
		    bpf_skb_store_bytes(skb, p->l4_off + 2, &port, 2, 0))
			return -1;
	}
	return 0;
}

// redirect4 forwards a packet translated at ingress to n->dst as the
// kernel's routing would (the TTL decremented), without the stack's input
// routing: ACT_NEXT leaves it to the stack when it is for the node itself.
static __always_inline int redirect4(struct __sk_buff *skb, struct nat *n, __u8 proto)
{
	struct bpf_fib_lookup fib = {};

	fib.family = AF_INET;
	fib.l4_protocol = proto;
	fib.ipv4_src = n->src[3];
	fib.ipv4_dst = n->dst[3];
	fib.ifindex = skb->ingress_ifindex;
	long r = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (r == BPF_FIB_LKUP_RET_NOT_FWDED)
		return ACT_NEXT;
	if (r != BPF_FIB_LKUP_RET_SUCCESS)
		return ACT_DROP;

	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > end || ip->ttl <= 1)
		return ACT_DROP;
	// TTL and protocol share a 16-bit word of the header checksum.
	__u16 old = *(__u16 *)&ip->ttl;
	ip->ttl--;
	__u16 new = *(__u16 *)&ip->ttl;
	if (bpf_l3_csum_replace(skb, IP_OFF + offsetof(struct iphdr, check), old, new, 2))
		return ACT_DROP;
	return bpf_redirect_neigh(fib.ifindex, 0, 0, 0);
}

// reverse translates a reply of a known connection: 0 if it is not one, 1
// if translated, -1 on failure. *n is the rewrite.
static __always_inline int reverse(struct __sk_buff *skb, struct pkt *p, struct nat *n)
{
	struct nat *rn = bpf_map_lookup_elem(&kpng_rct, &p->t);
	if (!rn)
		return 0;
	*n = *rn;
	if (rewrite4(skb, p, n))
		return -1;
	return 1;
}

// pick_endpoint returns an endpoint of the frontend's set, looking the
// frontend up again if the set was replaced between the two lookups (kpng
// writes the new set, switches the frontend, then deletes the old set).
static __always_inline struct endpoint *pick_endpoint(struct svc_key *k, struct svc_val *svc)
{
	struct slot_key sk = {.set = svc->set, .slot = bpf_get_prandom_u32() % svc->count};
	struct endpoint *ep = bpf_map_lookup_elem(&kpng_slots, &sk);
	if (ep)
		return ep;
	svc = bpf_map_lookup_elem(&kpng_services, k);
	if (!svc || svc->count == 0)
		return 0;
	sk.set = svc->set;
	sk.slot = bpf_get_prandom_u32() % svc->count;
	return bpf_map_lookup_elem(&kpng_slots, &sk);
}

// masquerade sets n's source to the address the node would use to reach
// the endpoint (as iptables' MASQUERADE does), with the client's port if
// that is free towards the endpoint, or another. 0: done; 1: the endpoint
// is the node itself (nothing to masquerade); -1: drop.
static __always_inline int masquerade(struct __sk_buff *skb, struct pkt *p, struct nat *n, struct nat *rev)
{
	struct bpf_fib_lookup fib = {};
	struct tuple rk = {};

	fib.family = AF_INET;
	fib.l4_protocol = p->t.proto;
	fib.ipv4_src = p->t.src[3];
	fib.ipv4_dst = n->dst[3];
	fib.ifindex = skb->ingress_ifindex;
	long r = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SRC | BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (r == BPF_FIB_LKUP_RET_NOT_FWDED)
		return 1;
	if (r != BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	n->src[3] = fib.ipv4_src;

	rk.src[2] = rk.dst[2] = bpf_htonl(0x0000ffff);
	rk.src[3] = n->dst[3];
	rk.sport = n->dport;
	rk.dst[3] = n->src[3];
	rk.proto = p->t.proto;
	__u16 port = p->t.sport;
	for (int i = 0; i < NAT_PORT_TRIES; i++) {
		rk.dport = port;
		if (bpf_map_update_elem(&kpng_rct, &rk, rev, BPF_NOEXIST) == 0) {
			n->sport = port;
			return 0;
		}
		port = bpf_htons(NAT_PORT_MIN + bpf_get_prandom_u32() % NAT_PORT_SPAN);
	}
	return -1;
}

// forward translates a packet of a connection to a frontend from outside
// (remembering the connection at its first packet) and forwards it.
// ACT_NEXT: not ours.
static __always_inline int forward(struct __sk_buff *skb, struct pkt *p)
{
	struct svc_key k = {};
	k.addr[2] = p->t.dst[2];
	k.addr[3] = p->t.dst[3];
	k.port = p->t.dport;
	k.proto = p->t.proto;
	k.scope = SCOPE_OUTSIDE;
	struct svc_val *svc = bpf_map_lookup_elem(&kpng_services, &k);

	struct nat *known = bpf_map_lookup_elem(&kpng_ct, &p->t);
	// A TCP connection keeps its endpoint. A UDP flow is chosen again once
	// the frontend's set changed (it may have lost the endpoint: kube-proxy
	// deletes the conntrack entries of a removed UDP endpoint).
	if (known && (p->t.proto == IPPROTO_TCP || (svc && svc->set == known->set))) {
		struct nat copy = *known;
		if (rewrite4(skb, p, &copy))
			return ACT_DROP;
		return redirect4(skb, &copy, p->t.proto);
	}
	if (!svc)
		return ACT_NEXT;
	if (svc->count == 0) // no endpoint (for this node, under Local): dropped
		return ACT_DROP;
	int masq = svc->flags & SVC_F_MASQ;
	struct endpoint *ep = pick_endpoint(&k, svc);
	if (!ep || ep->addr[2] != bpf_htonl(0x0000ffff))
		return ACT_DROP;

	struct nat n = {}, rev = {};
	n.set = svc->set;
	n.src[2] = n.dst[2] = bpf_htonl(0x0000ffff);
	n.src[3] = p->t.src[3];
	n.sport = p->t.sport;
	n.dst[3] = ep->addr[3];
	n.dport = ep->port;
	// The replies: from the endpoint, back to the frontend's client.
	rev.src[2] = rev.dst[2] = bpf_htonl(0x0000ffff);
	rev.src[3] = p->t.dst[3];
	rev.sport = p->t.dport;
	rev.dst[3] = p->t.src[3];
	rev.dport = p->t.sport;

	if (masq && masquerade(skb, p, &n, &rev) < 0)
		return ACT_DROP;
	if (n.src[3] == p->t.src[3] && n.sport == p->t.sport) {
		// Not masqueraded: the replies go to the client itself.
		struct tuple rk = {};
		rk.src[2] = rk.dst[2] = bpf_htonl(0x0000ffff);
		rk.src[3] = n.dst[3];
		rk.sport = n.dport;
		rk.dst[3] = n.src[3];
		rk.dport = n.sport;
		rk.proto = p->t.proto;
		bpf_map_update_elem(&kpng_rct, &rk, &rev, BPF_ANY);
	}
	bpf_map_update_elem(&kpng_ct, &p->t, &n, BPF_ANY);
	if (rewrite4(skb, p, &n))
		return ACT_DROP;
	return redirect4(skb, &n, p->t.proto);
}

SEC("tcx/ingress")
int kpng_nodeport_in(struct __sk_buff *skb)
{
	struct pkt p = {};
	struct nat n;

	if (!parse4(skb, &p))
		return ACT_NEXT;
	int r = reverse(skb, &p, &n);
	if (r < 0)
		return ACT_DROP;
	if (r > 0)
		return redirect4(skb, &n, p.t.proto);
	return forward(skb, &p);
}

SEC("tcx/egress")
int kpng_nodeport_out(struct __sk_buff *skb)
{
	struct pkt p = {};
	struct nat n;

	if (!parse4(skb, &p))
		return ACT_NEXT;
	return reverse(skb, &p, &n) < 0 ? ACT_DROP : ACT_NEXT;
}
