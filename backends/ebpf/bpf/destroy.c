//go:build ignore

// Socket destroy: iterator programs (iter/udp, iter/tcp) that abort the
// sockets of the node that the socket programs (sock.c) connected through
// a Service to an endpoint that is no longer one of the Service port's
// serving endpoints. A connected UDP socket otherwise keeps sending to the
// endpoint its connect() chose, as a conntrack entry would under
// kube-proxy, which deletes those entries after a sync; here the socket is
// aborted (bpf_sock_destroy, Linux 6.5+: the application sees
// ECONNABORTED) and its next connect() is balanced anew.
//
// kpng fills kpng_stale with the (Service address, endpoint) pairs a sync
// made stale, runs the program in each network namespace whose sockets the
// socket programs serve (an iterator walks the sockets of the namespace it
// was opened in), and empties the map. A socket is destroyed only if
//   - its destination is an endpoint and its cookie has a reverse entry in
//     kpng_revnat towards that endpoint: the socket programs translated it,
//     so it was connected through a Service (a socket connected to a pod
//     IP directly has no entry: it is never touched), and
//   - the Service address of that entry, with this endpoint, is in
//     kpng_stale.
//
// No vmlinux.h: the few kernel fields read here are declared below with
// preserve_access_index, so that their offsets are relocated against the
// running kernel's BTF at load (CO-RE). A generated vmlinux.h would be
// megabytes of one build machine's kernel in the repository, and the
// committed object would then depend on which kernel generated it.

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

// The kernel's types, only the fields read (CO-RE: matched by name).

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	void *udp_sk; // struct udp_sock *, which starts with its struct sock_common
} __attribute__((preserve_access_index));

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	void *sk_common;
} __attribute__((preserve_access_index));

struct sock_common {
	__be32 skc_daddr;
	__be16 skc_dport;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

// Socket states (include/net/tcp_states.h); a connected UDP socket is
// TCP_ESTABLISHED.
#define KPNG_TCP_ESTABLISHED 1
#define KPNG_TCP_SYN_SENT 2
#define KPNG_TCP_TIME_WAIT 6
#define KPNG_TCP_CLOSE 7
#define KPNG_TCP_LISTEN 10
#define KPNG_TCP_NEW_SYN_RECV 12

// As in maps.h and sock.c: kpng_revnat here is replaced, at load, by the
// map the socket programs write (the layouts must be equal; the loader
// checks the sizes).
struct endpoint {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

struct rev_key {
	__u64 cookie;
	struct endpoint ep;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rev_key);
	__type(value, struct endpoint);
} kpng_revnat SEC(".maps");

// A stale pair: sockets connected through Service address svc (port and
// protocol included) to endpoint ep are to be destroyed.
struct stale_key {
	struct endpoint svc;
	struct endpoint ep;
	__u8 proto;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct stale_key);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} kpng_stale SEC(".maps");

// destroy destroys sk if it is a stale socket of protocol proto; it writes
// the cookies of the sockets destroyed to the iterator's output, so that
// kpng counts them.
static __always_inline void destroy(struct bpf_iter_meta *meta, struct sock_common *sk, __u8 proto)
{
	struct rev_key rk = {};
	struct stale_key sk_key = {};

	switch (sk->skc_family) {
	case 2: // AF_INET
		rk.ep.addr[2] = bpf_htonl(0x0000ffff);
		rk.ep.addr[3] = sk->skc_daddr;
		break;
	case 10: // AF_INET6 (an IPv4 peer of a dual-stack socket is ::ffff:a.b.c.d, as the socket programs keep it)
		__builtin_memcpy(rk.ep.addr, &sk->skc_v6_daddr, sizeof(rk.ep.addr));
		break;
	default:
		return;
	}
	rk.ep.port = sk->skc_dport;
	if (rk.ep.port == 0)
		return; // not connected
	rk.cookie = bpf_get_socket_cookie(sk);
	struct endpoint *svc = bpf_map_lookup_elem(&kpng_revnat, &rk);
	if (!svc)
		return; // not connected through a Service
	sk_key.svc.addr[0] = svc->addr[0];
	sk_key.svc.addr[1] = svc->addr[1];
	sk_key.svc.addr[2] = svc->addr[2];
	sk_key.svc.addr[3] = svc->addr[3];
	sk_key.svc.port = svc->port;
	sk_key.ep = rk.ep;
	sk_key.proto = proto;
	if (!bpf_map_lookup_elem(&kpng_stale, &sk_key))
		return;
	if (bpf_sock_destroy(sk) != 0)
		return;
	// A destroyed UDP socket is disconnected (its destination cleared):
	// sock_release (sock.c) would not find its entry when it is closed.
	bpf_map_delete_elem(&kpng_revnat, &rk);
	bpf_seq_write(meta->seq, &rk.cookie, sizeof(rk.cookie));
}

SEC("iter/udp")
int kpng_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = ctx->udp_sk;

	if (!sk)
		return 0;
	// Only connected sockets: an unconnected one that sent to a Service
	// has reverse entries too (sendmsg writes them for recvmsg), but no
	// destination of its own; its next datagram is balanced anew anyway
	// (sock.c's flows follow the Service's set).
	if (sk->skc_state != KPNG_TCP_ESTABLISHED)
		return 0;
	destroy(ctx->meta, sk, IPPROTO_UDP);
	return 0;
}

SEC("iter/tcp")
int kpng_destroy_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *sk = ctx->sk_common;

	if (!sk)
		return 0;
	// Full sockets with a peer only: not listeners, nor the
	// mini-sockets of a handshake or of TIME_WAIT.
	switch (sk->skc_state) {
	case KPNG_TCP_LISTEN:
	case KPNG_TCP_CLOSE:
	case KPNG_TCP_TIME_WAIT:
	case KPNG_TCP_NEW_SYN_RECV:
		return 0;
	}
	destroy(ctx->meta, sk, IPPROTO_TCP);
	return 0;
}
