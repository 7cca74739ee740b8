// The maps that both the socket programs (sock.c) and the node-port
// programs (nodeport.c) read: the frontends, the backend sets and their
// members. kpng
// writes them (backends/ebpf); the Go side loads nodeport.c with sock.c's
// maps in their place, so that both see the same entries.

// svc_key.scope: who dials the frontend.
#define SCOPE_NODE 0    // a socket of the node (cgroup programs)
#define SCOPE_OUTSIDE 1 // a packet from outside the node (tc programs)

// A Service address: the frontend a socket dials, or a packet from outside
// the node is addressed to.
struct svc_key {
	__u32 addr[4]; // network order; IPv4 as ::ffff:a.b.c.d
	__u16 port;    // network order
	__u8 proto;    // IPPROTO_TCP, IPPROTO_UDP
	__u8 scope;    // SCOPE_NODE, SCOPE_OUTSIDE
};

// svc_val.flags
#define SVC_F_DROP 1 // no endpoint for this node, but some elsewhere: kube-proxy drops (the client times out)
#define SVC_F_MASQ 2 // from outside: masquerade to the node's address (externalTrafficPolicy Cluster)
#define SVC_F_NODEPORT 4 // from outside: a node port on a node address (without endpoints, the stack refuses it)
#define SVC_F_RANGES 8   // from outside: only clients in kpng_source_ranges (loadBalancerSourceRanges)

struct svc_val {
	__u32 set;          // the backend set: slots (set, 0..count-1)
	__u32 count;        // 0: no endpoint, the connection is refused
	__u32 affinity_sec; // ClientIP affinity timeout; 0: none
	__u32 affinity_id;  // stable per Service port, keys the affinity map
	__u32 flags;
};

struct slot_key {
	__u32 set;
	__u32 slot;
};

struct endpoint {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, struct svc_key);
	__type(value, struct svc_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 524288);
	__type(key, struct slot_key);
	__type(value, struct endpoint);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_slots SEC(".maps");

struct member_key {
	__u32 set;
	struct endpoint ep;
};

// Which endpoints a set holds: an affinity is followed only while its
// endpoint is still in the Service's set.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, struct member_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kpng_members SEC(".maps");
