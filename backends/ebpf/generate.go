package ebpf

// The BPF objects are compiled from bpf/sock.c and bpf/nodeport.c (both
// include bpf/maps.h) and bpf/destroy.c (the socket-destroy iterators) and
// committed (*_bpfel.o and their Go bindings), so
// that building kpng needs no clang. After a change to bpf/, run `go generate ./backends/ebpf` (clang and libbpf-dev, from
// hack/install-test-deps.sh); hack/verify-ebpf.sh checks that the committed
// objects are those of the sources.
//
// -I/usr/include/x86_64-linux-gnu: Debian keeps asm/types.h, which
// linux/bpf.h includes, under the multiarch folder.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type svc_key -type svc_val -type slot_key -type endpoint -type rev_key -type affinity_key -type affinity_val -type member_key -type flow_key -type flow_val sock bpf/sock.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type tuple -type nat -type range_key nodeport bpf/nodeport.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type stale_key destroy bpf/destroy.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
