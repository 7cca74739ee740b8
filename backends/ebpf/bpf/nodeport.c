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
// ICMP errors about a translated connection are translated back as
// conntrack's RELATED ones are (icmp4, icmp6).
//
// A packet translated at ingress is forwarded by the program (bpf_fib_lookup,
// then bpf_redirect_neigh), not handed to the stack: its source may now be
// one of the node's own addresses (masquerade, or a reply from a NodePort),
// which the stack's input routing drops as a martian.
//
// IPv4 and IPv6 (without extension headers); IPv4 addresses are kept
// IPv4-mapped (::ffff:a.b.c.d) in the maps, as in the others.

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "maps.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10

// tcx verdicts (linux/bpf.h's TCX_NEXT and TCX_DROP, which Debian's headers
// lack): a packet that is not kpng's, or that kpng translated, goes on to
// the next program of the interface (a CNI's), or to the stack.
#define ACT_NEXT -1
#define ACT_DROP 2

// Masquerade picks a source port at random in 1024-65535 outside the
// node's ephemeral ports (ip_local_port_range, [eph_min, eph_max], set by
// kpng at load), so that a masqueraded connection never takes the 4-tuple
// of a connection of the node itself to the same endpoint (a kubelet
// probe, say), which would then get the other's replies. It tries
// NAT_PORT_TRIES ports before dropping the packet.
volatile const __u32 eph_min = 32768;
volatile const __u32 eph_max = 60999;
#define NAT_PORT_TRIES 16

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

// ClientIP session affinity from outside: one client address to one
// endpoint of one Service port (the affinity id kpng gives the port).
struct client_affinity_key {
	__u32 addr[4];
	__u32 affinity_id;
};

struct client_affinity_val {
	struct endpoint ep;
	__u32 pad;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct client_affinity_key);
	__type(value, struct client_affinity_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_client_affinity SEC(".maps");

// loadBalancerSourceRanges: a client prefix allowed to reach one frontend
// (longest-prefix match on the frontend, then the client's address).
struct range_key {
	__u32 prefixlen; // 160 (the frontend) + the client prefix's bits
	struct svc_key svc;
	__u32 addr[4]; // IPv4 as ::ffff:a.b.c.d (a /24 is a /120)
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__type(key, struct range_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_source_ranges SEC(".maps");

struct pkt {
	struct tuple t;
	__u32 l4_off;   // of the TCP or UDP header
	__u32 csum_off; // of its checksum
	__u8 v6;
	__u8 syn; // a TCP SYN without ACK: a connection's first packet
};

#define IP_OFF ETH_HLEN // the IP header: after the Ethernet one

static __always_inline int is_v4mapped(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0x0000ffff);
}

static __always_inline void copy_addr(__u32 *dst, const __u32 *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
	dst[3] = src[3];
}

static __always_inline int same_addr(const __u32 *a, const __u32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

// parse reads an IPv4 or IPv6 TCP or UDP packet's tuple; 0 for anything
// else (other protocols, IPv4 later fragments, IPv6 extension headers,
// non-Ethernet frames).
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u16 ports[2];

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + ETH_HLEN;
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return 0;
		if (ip->frag_off & bpf_htons(0x1fff)) // no ports in a later fragment
			return 0;
		p->t.src[2] = bpf_htonl(0x0000ffff);
		p->t.src[3] = ip->saddr;
		p->t.dst[2] = bpf_htonl(0x0000ffff);
		p->t.dst[3] = ip->daddr;
		p->t.proto = ip->protocol;
		p->l4_off = ETH_HLEN + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;
		if ((void *)(ip6 + 1) > end)
			return 0;
		copy_addr(p->t.src, ip6->saddr.in6_u.u6_addr32);
		copy_addr(p->t.dst, ip6->daddr.in6_u.u6_addr32);
		p->t.proto = ip6->nexthdr;
		p->l4_off = ETH_HLEN + sizeof(*ip6);
		p->v6 = 1;
	} else {
		return 0;
	}
	if (p->t.proto != IPPROTO_TCP && p->t.proto != IPPROTO_UDP)
		return 0;
	p->csum_off = p->l4_off + (p->t.proto == IPPROTO_TCP ? 16 : 6);
	if (bpf_skb_load_bytes(skb, p->l4_off, ports, sizeof(ports)))
		return 0;
	p->t.sport = ports[0];
	p->t.dport = ports[1];
	if (p->t.proto == IPPROTO_TCP) {
		__u8 flags;
		if (bpf_skb_load_bytes(skb, p->l4_off + 13, &flags, 1))
			return 0;
		p->syn = (flags & 0x12) == 0x02; // SYN set, ACK clear
	}
	return 1;
}

// rewrite_addr replaces one address (off: in the IP header) with the
// checksums updated incrementally.
static __always_inline int rewrite_addr(struct __sk_buff *skb, struct pkt *p, __u32 off, __u32 *old, __u32 *new, __u64 l4f)
{
	if (same_addr(old, new))
		return 0;
	if (!p->v6) {
		__u32 o = old[3], v = new[3];
		if (bpf_l4_csum_replace(skb, p->csum_off, o, v, l4f | BPF_F_PSEUDO_HDR | 4) ||
		    bpf_l3_csum_replace(skb, IP_OFF + offsetof(struct iphdr, check), o, v, 4) ||
		    bpf_skb_store_bytes(skb, IP_OFF + off, &v, 4, 0))
			return -1;
		return 0;
	}
	// IPv6 has no header checksum; the TCP/UDP one covers the addresses.
	__s64 diff = bpf_csum_diff(old, 16, new, 16, 0);
	if (diff < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, p->csum_off, 0, diff, l4f | BPF_F_PSEUDO_HDR) ||
	    bpf_skb_store_bytes(skb, IP_OFF + off, new, 16, 0))
		return -1;
	return 0;
}

// rewrite rewrites the packet's addresses and ports to n, with the
// checksums updated incrementally (an IPv4 UDP checksum of 0, none, stays
// 0).
static __always_inline int rewrite(struct __sk_buff *skb, struct pkt *p, struct nat *n)
{
	__u64 l4f = p->t.proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 saddr = p->v6 ? offsetof(struct ipv6hdr, saddr) : offsetof(struct iphdr, saddr);
	__u32 daddr = p->v6 ? offsetof(struct ipv6hdr, daddr) : offsetof(struct iphdr, daddr);

	if (rewrite_addr(skb, p, saddr, p->t.src, n->src, l4f) ||
	    rewrite_addr(skb, p, daddr, p->t.dst, n->dst, l4f))
		return -1;
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

// fib looks up the route from src to dst as the node would forward a
// packet that came in on this interface.
static __always_inline long fib(struct __sk_buff *skb, struct pkt *p, struct bpf_fib_lookup *f, __u32 *src, __u32 *dst, __u32 flags)
{
	f->l4_protocol = p->t.proto;
	f->ifindex = skb->ingress_ifindex;
	if (p->v6) {
		f->family = AF_INET6;
		copy_addr(f->ipv6_src, src);
		copy_addr(f->ipv6_dst, dst);
	} else {
		f->family = AF_INET;
		f->ipv4_src = src[3];
		f->ipv4_dst = dst[3];
	}
	return bpf_fib_lookup(skb, f, sizeof(*f), flags | BPF_FIB_LOOKUP_SKIP_NEIGH);
}

// redirect forwards a packet translated at ingress to n->dst as the
// kernel's routing would (TTL or hop limit decremented), without the
// stack's input routing: ACT_NEXT leaves it to the stack when it is for the
// node itself.
static __always_inline int redirect(struct __sk_buff *skb, struct pkt *p, struct nat *n)
{
	struct bpf_fib_lookup f = {};

	long r = fib(skb, p, &f, n->src, n->dst, 0);
	if (r == BPF_FIB_LKUP_RET_NOT_FWDED)
		return ACT_NEXT;
	if (r != BPF_FIB_LKUP_RET_SUCCESS)
		return ACT_DROP;

	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (p->v6) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;
		if ((void *)(ip6 + 1) > end || ip6->hop_limit <= 1)
			return ACT_DROP;
		ip6->hop_limit--;
	} else {
		struct iphdr *ip = data + ETH_HLEN;
		if ((void *)(ip + 1) > end || ip->ttl <= 1)
			return ACT_DROP;
		// TTL and protocol share a 16-bit word of the header checksum.
		__u16 old = *(__u16 *)&ip->ttl;
		ip->ttl--;
		__u16 new = *(__u16 *)&ip->ttl;
		if (bpf_l3_csum_replace(skb, IP_OFF + offsetof(struct iphdr, check), old, new, 2))
			return ACT_DROP;
	}
	return bpf_redirect_neigh(f.ifindex, 0, 0, 0);
}

// reverse translates a reply of a known connection: 0 if it is not one, 1
// if translated, -1 on failure. *n is the rewrite.
static __always_inline int reverse(struct __sk_buff *skb, struct pkt *p, struct nat *n)
{
	struct nat *rn = bpf_map_lookup_elem(&kpng_rct, &p->t);
	if (!rn)
		return 0;
	*n = *rn;
	if (rewrite(skb, p, n))
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

// nat_port returns a random port of 1024-65535 outside [eph_min, eph_max].
static __always_inline __u16 nat_port(void)
{
	__u32 lo = eph_min, hi = eph_max;
	__u32 span = 64512, skip = 0;
	if (lo >= 1024 && hi >= lo && hi <= 65535 && hi - lo + 1 < span) {
		skip = hi - lo + 1;
		span -= skip;
	}
	__u32 port = 1024 + bpf_get_prandom_u32() % span;
	if (skip && port >= lo)
		port += skip;
	return bpf_htons((__u16)port);
}

// masquerade sets n's source to the address the node would use to reach
// the endpoint (as iptables' MASQUERADE does), with a free port. 0: done; 1: the route to
// the endpoint is not a forward (the endpoint is the node itself, or
// unroutable): nothing to masquerade, the stack decides; -1: drop.
static __always_inline int masquerade(struct __sk_buff *skb, struct pkt *p, struct nat *n, struct nat *rev)
{
	struct bpf_fib_lookup f = {};
	struct tuple rk = {};

	long r = fib(skb, p, &f, p->t.src, n->dst, BPF_FIB_LOOKUP_SRC);
	if (r == BPF_FIB_LKUP_RET_NOT_FWDED)
		return 1;
	if (r != BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	if (p->v6)
		copy_addr(n->src, f.ipv6_src);
	else
		n->src[3] = f.ipv4_src;

	copy_addr(rk.src, n->dst);
	rk.sport = n->dport;
	copy_addr(rk.dst, n->src);
	rk.proto = p->t.proto;
	for (int i = 0; i < NAT_PORT_TRIES; i++) {
		rk.dport = nat_port();
		if (bpf_map_update_elem(&kpng_rct, &rk, rev, BPF_NOEXIST) == 0) {
			n->sport = rk.dport;
			return 0;
		}
	}
	return -1;
}

// forward translates a packet of a connection to a frontend from outside
// (remembering the connection at its first packet) and forwards it.
// ACT_NEXT: not ours.
static __always_inline int forward(struct __sk_buff *skb, struct pkt *p)
{
	struct svc_key k = {};
	copy_addr(k.addr, p->t.dst);
	k.port = p->t.dport;
	k.proto = p->t.proto;
	k.scope = SCOPE_OUTSIDE;
	struct svc_val *svc = bpf_map_lookup_elem(&kpng_services, &k);

	struct nat *known = bpf_map_lookup_elem(&kpng_ct, &p->t);
	// A TCP connection keeps its endpoint. A UDP flow, or a new TCP
	// connection from the same address and port as an old one (a SYN), is
	// chosen again once the frontend's set changed: it may have lost the
	// endpoint (kube-proxy deletes the conntrack entries of a removed UDP
	// endpoint; conntrack takes a SYN as a new connection).
	int keep = p->t.proto == IPPROTO_TCP && !p->syn;
	if (known && (keep || (svc && svc->set == known->set))) {
		struct nat copy = *known;
		if (rewrite(skb, p, &copy))
			return ACT_DROP;
		return redirect(skb, p, &copy);
	}
	if (!svc)
		return ACT_NEXT;
	if (svc->count == 0) {
		// No endpoint for this node under Local: dropped, as kube-proxy
		// drops. No endpoint at all: kube-proxy rejects; a node port (an
		// address of the node) is left to the stack, which refuses it as
		// it refuses any closed port (a TCP reset, an ICMP port
		// unreachable); other addresses are dropped, as the stack would
		// route them elsewhere.
		if (!(svc->flags & SVC_F_DROP) && (svc->flags & SVC_F_NODEPORT))
			return ACT_NEXT;
		return ACT_DROP;
	}
	if (svc->flags & SVC_F_RANGES) {
		// A new connection from a client outside the Service's
		// loadBalancerSourceRanges: dropped, as kube-proxy drops it.
		struct range_key rk = {};
		rk.prefixlen = 8 * (sizeof(struct svc_key) + 16);
		rk.svc = k;
		copy_addr(rk.addr, p->t.src);
		if (!bpf_map_lookup_elem(&kpng_source_ranges, &rk))
			return ACT_DROP;
	}
	int masq = svc->flags & SVC_F_MASQ;
	__u32 set = svc->set;
	struct endpoint chosen = {};
	int have = 0;

	// ClientIP affinity: the client's endpoint while fresh and still in
	// the set, as for the sockets (where the client is a network
	// namespace).
	struct client_affinity_key ak = {};
	__u64 now = 0;
	__u32 affinity_sec = svc->affinity_sec;
	if (affinity_sec) {
		copy_addr(ak.addr, p->t.src);
		ak.affinity_id = svc->affinity_id;
		now = bpf_ktime_get_ns();
		struct client_affinity_val *av = bpf_map_lookup_elem(&kpng_client_affinity, &ak);
		if (av && now - av->last_ns <= (__u64)affinity_sec * 1000000000ULL) {
			struct member_key mk = {};
			mk.set = set;
			mk.ep = av->ep;
			if (bpf_map_lookup_elem(&kpng_members, &mk)) {
				av->last_ns = now;
				chosen = av->ep;
				have = 1;
			}
		}
	}
	if (!have) {
		struct endpoint *ep = pick_endpoint(&k, svc);
		if (!ep)
			return ACT_DROP;
		chosen = *ep;
		if (affinity_sec) {
			struct client_affinity_val av = {};
			av.ep = chosen;
			av.last_ns = now;
			bpf_map_update_elem(&kpng_client_affinity, &ak, &av, BPF_ANY);
		}
	}
	if (is_v4mapped(chosen.addr) == p->v6) // not of the packet's family
		return ACT_DROP;

	struct nat n = {}, rev = {};
	n.set = set;
	copy_addr(n.src, p->t.src);
	n.sport = p->t.sport;
	copy_addr(n.dst, chosen.addr);
	n.dport = chosen.port;
	// The replies: from the endpoint, back to the frontend's client.
	copy_addr(rev.src, p->t.dst);
	rev.sport = p->t.dport;
	copy_addr(rev.dst, p->t.src);
	rev.dport = p->t.sport;

	int r = 1;
	if (masq)
		r = masquerade(skb, p, &n, &rev);
	if (r < 0)
		return ACT_DROP;
	if (r > 0) {
		// Not masqueraded: the replies go to the client itself.
		struct tuple rk = {};
		copy_addr(rk.src, n.dst);
		rk.sport = n.dport;
		copy_addr(rk.dst, n.src);
		rk.dport = n.sport;
		rk.proto = p->t.proto;
		bpf_map_update_elem(&kpng_rct, &rk, &rev, BPF_ANY);
	}
	bpf_map_update_elem(&kpng_ct, &p->t, &n, BPF_ANY);
	if (rewrite(skb, p, &n))
		return ACT_DROP;
	return redirect(skb, p, &n);
}

// icmp4 translates an IPv4 ICMP error (destination unreachable, time
// exceeded: "fragmentation needed" among them) about a translated
// connection, as conntrack's RELATED does, so that the host that sent the
// packet in error learns of it: the quoted packet is rewritten to what that
// host sent, and the error is addressed to it. Errors about a reply (sent
// by a router towards the client) go to the endpoint; errors about a
// forwarded packet (sent towards the endpoint) go to the client. At
// ingress the translated error is forwarded (redirect4 forward), at egress
// it goes on. ACT_NEXT: not one of ours.
static __always_inline int icmp4(struct __sk_buff *skb, int ingress)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	struct iphdr in;
	__u8 icmp[2];
	__u16 ports[2];

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->protocol != IPPROTO_ICMP || ip->ihl < 5)
		return ACT_NEXT;
	if (ip->frag_off & bpf_htons(0x1fff))
		return ACT_NEXT;
	__u32 outer_src = ip->saddr, outer_dst = ip->daddr;
	__u32 icmp_off = ETH_HLEN + ip->ihl * 4;
	if (bpf_skb_load_bytes(skb, icmp_off, icmp, sizeof(icmp)))
		return ACT_NEXT;
	if (icmp[0] != 3 && icmp[0] != 11) // ICMP_DEST_UNREACH, ICMP_TIME_EXCEEDED
		return ACT_NEXT;
	__u32 in_off = icmp_off + 8;
	if (bpf_skb_load_bytes(skb, in_off, &in, sizeof(in)) || in.ihl < 5)
		return ACT_NEXT;
	if (in.protocol != IPPROTO_TCP && in.protocol != IPPROTO_UDP)
		return ACT_NEXT;
	__u32 in_l4 = in_off + in.ihl * 4;
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)))
		return ACT_NEXT;

	// The quoted packet's connection, seen the other way round.
	struct tuple k = {};
	k.src[2] = k.dst[2] = bpf_htonl(0x0000ffff);
	k.src[3] = in.daddr;
	k.dst[3] = in.saddr;
	k.sport = ports[1];
	k.dport = ports[0];
	k.proto = in.protocol;

	// Either way the entry found rewrites packets going the other way than
	// the quoted one: read backwards, it gives what the sender of the
	// quoted packet sent (n->dst:n->dport to n->src:n->sport), and the
	// sender is n->dst (about a reply: the endpoint; about a forwarded
	// packet: the client).
	struct nat *n = bpf_map_lookup_elem(&kpng_ct, &k);
	if (!n)
		n = bpf_map_lookup_elem(&kpng_rct, &k);
	if (!n)
		return ACT_NEXT;
	__u32 new_src = n->dst[3], new_dst = n->src[3], new_outer = n->dst[3];
	__u16 new_sport = n->dport, new_dport = n->sport;

	__u32 ip_check = ETH_HLEN + offsetof(struct iphdr, check);
	__u32 in_check = in_off + offsetof(struct iphdr, check);
	__u32 icmp_check = icmp_off + 2;
	// The quoted header keeps its own checksum right, so the ICMP
	// checksum only follows the quoted ports; the outer header has no
	// pseudo-header in ICMP's.
	if (outer_dst != new_outer &&
	    (bpf_l3_csum_replace(skb, ip_check, outer_dst, new_outer, 4) ||
	     bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, daddr), &new_outer, 4, 0)))
		return ACT_DROP;
	if (in.saddr != new_src &&
	    (bpf_l3_csum_replace(skb, in_check, in.saddr, new_src, 4) ||
	     bpf_skb_store_bytes(skb, in_off + offsetof(struct iphdr, saddr), &new_src, 4, 0)))
		return ACT_DROP;
	if (in.daddr != new_dst &&
	    (bpf_l3_csum_replace(skb, in_check, in.daddr, new_dst, 4) ||
	     bpf_skb_store_bytes(skb, in_off + offsetof(struct iphdr, daddr), &new_dst, 4, 0)))
		return ACT_DROP;
	if (ports[0] != new_sport &&
	    (bpf_l4_csum_replace(skb, icmp_check, ports[0], new_sport, 2) ||
	     bpf_skb_store_bytes(skb, in_l4, &new_sport, 2, 0)))
		return ACT_DROP;
	if (ports[1] != new_dport &&
	    (bpf_l4_csum_replace(skb, icmp_check, ports[1], new_dport, 2) ||
	     bpf_skb_store_bytes(skb, in_l4 + 2, &new_dport, 2, 0)))
		return ACT_DROP;
	if (!ingress)
		return ACT_NEXT;

	struct pkt p = {};
	struct nat fw = {};
	p.t.proto = IPPROTO_ICMP;
	fw.src[2] = fw.dst[2] = bpf_htonl(0x0000ffff);
	fw.src[3] = outer_src;
	fw.dst[3] = new_outer;
	return redirect(skb, &p, &fw);
}

#define IPPROTO_ICMPV6_ 58

// icmp6 is icmp4 for ICMPv6 errors (destination unreachable, packet too
// big, time exceeded), whose checksum covers a pseudo-header and the
// quoted addresses (an IPv6 header has no checksum of its own).
static __always_inline int icmp6(struct __sk_buff *skb, int ingress)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	struct ipv6hdr in;
	__u8 icmp[2];
	__u16 ports[2];
	__u32 outer_src[4], outer_dst[4];

	if ((void *)(ip6 + 1) > end || eth->h_proto != bpf_htons(ETH_P_IPV6) || ip6->nexthdr != IPPROTO_ICMPV6_)
		return ACT_NEXT;
	copy_addr(outer_src, ip6->saddr.in6_u.u6_addr32);
	copy_addr(outer_dst, ip6->daddr.in6_u.u6_addr32);
	__u32 icmp_off = ETH_HLEN + sizeof(struct ipv6hdr);
	if (bpf_skb_load_bytes(skb, icmp_off, icmp, sizeof(icmp)))
		return ACT_NEXT;
	if (icmp[0] < 1 || icmp[0] > 3) // unreachable, packet too big, time exceeded
		return ACT_NEXT;
	__u32 in_off = icmp_off + 8;
	if (bpf_skb_load_bytes(skb, in_off, &in, sizeof(in)))
		return ACT_NEXT;
	if (in.nexthdr != IPPROTO_TCP && in.nexthdr != IPPROTO_UDP)
		return ACT_NEXT;
	__u32 in_l4 = in_off + sizeof(struct ipv6hdr);
	if (bpf_skb_load_bytes(skb, in_l4, ports, sizeof(ports)))
		return ACT_NEXT;

	struct tuple k = {};
	copy_addr(k.src, in.daddr.in6_u.u6_addr32);
	copy_addr(k.dst, in.saddr.in6_u.u6_addr32);
	k.sport = ports[1];
	k.dport = ports[0];
	k.proto = in.nexthdr;
	struct nat *n = bpf_map_lookup_elem(&kpng_ct, &k);
	if (!n)
		n = bpf_map_lookup_elem(&kpng_rct, &k);
	if (!n)
		return ACT_NEXT;
	struct nat c = *n; // new quoted source c.dst:c.dport, destination c.src:c.sport; to c.dst

	__u32 icmp_check = icmp_off + 2;
	if (!same_addr(outer_dst, c.dst)) {
		__s64 diff = bpf_csum_diff(outer_dst, 16, c.dst, 16, 0);
		if (diff < 0 || bpf_l4_csum_replace(skb, icmp_check, 0, diff, BPF_F_PSEUDO_HDR) ||
		    bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, daddr), c.dst, 16, 0))
			return ACT_DROP;
	}
	if (!same_addr(in.saddr.in6_u.u6_addr32, c.dst)) {
		__s64 diff = bpf_csum_diff(in.saddr.in6_u.u6_addr32, 16, c.dst, 16, 0);
		if (diff < 0 || bpf_l4_csum_replace(skb, icmp_check, 0, diff, 0) ||
		    bpf_skb_store_bytes(skb, in_off + offsetof(struct ipv6hdr, saddr), c.dst, 16, 0))
			return ACT_DROP;
	}
	if (!same_addr(in.daddr.in6_u.u6_addr32, c.src)) {
		__s64 diff = bpf_csum_diff(in.daddr.in6_u.u6_addr32, 16, c.src, 16, 0);
		if (diff < 0 || bpf_l4_csum_replace(skb, icmp_check, 0, diff, 0) ||
		    bpf_skb_store_bytes(skb, in_off + offsetof(struct ipv6hdr, daddr), c.src, 16, 0))
			return ACT_DROP;
	}
	if (ports[0] != c.dport &&
	    (bpf_l4_csum_replace(skb, icmp_check, ports[0], c.dport, 2) ||
	     bpf_skb_store_bytes(skb, in_l4, &c.dport, 2, 0)))
		return ACT_DROP;
	if (ports[1] != c.sport &&
	    (bpf_l4_csum_replace(skb, icmp_check, ports[1], c.sport, 2) ||
	     bpf_skb_store_bytes(skb, in_l4 + 2, &c.sport, 2, 0)))
		return ACT_DROP;
	if (!ingress)
		return ACT_NEXT;

	struct pkt p = {};
	struct nat fw = {};
	p.v6 = 1;
	p.t.proto = IPPROTO_ICMPV6_;
	copy_addr(fw.src, outer_src);
	copy_addr(fw.dst, c.dst);
	return redirect(skb, &p, &fw);
}

// icmp translates an ICMP or ICMPv6 error about a translated connection.
static __always_inline int icmp(struct __sk_buff *skb, int ingress)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return ACT_NEXT;
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return icmp4(skb, ingress);
	return icmp6(skb, ingress);
}

SEC("tcx/ingress")
int kpng_nodeport_in(struct __sk_buff *skb)
{
	struct pkt p = {};
	struct nat n;

	if (!parse(skb, &p))
		return icmp(skb, 1);
	int r = reverse(skb, &p, &n);
	if (r < 0)
		return ACT_DROP;
	if (r > 0)
		return redirect(skb, &p, &n);
	return forward(skb, &p);
}

SEC("tcx/egress")
int kpng_nodeport_out(struct __sk_buff *skb)
{
	struct pkt p = {};
	struct nat n;

	if (!parse(skb, &p))
		return icmp(skb, 0);
	return reverse(skb, &p, &n) < 0 ? ACT_DROP : ACT_NEXT;
}
