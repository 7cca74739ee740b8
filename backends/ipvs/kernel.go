package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DummyInterface is the interface that holds the service addresses, as in
// kube-proxy's ipvs mode: IPVS serves only addresses that are local.
const DummyInterface = "kube-ipvs0"

// kernel is the node's side of the backend beyond IPVS: kube-ipvs0 and its
// addresses, the node's own addresses, ipsets and iptables. Tests use a
// fake.
type kernel interface {
	// ensureDummy creates kube-ipvs0 when missing.
	ensureDummy() error
	// dummyAddrs lists kube-ipvs0's addresses of a family (none when it
	// does not exist).
	dummyAddrs(ipv6 bool) ([]netip.Addr, error)
	addAddr(a netip.Addr) error
	delAddr(a netip.Addr) error
	// nodeAddrs lists the node's addresses of a family that can accept
	// node ports: all but kube-ipvs0's, loopback and link-local ones.
	nodeAddrs(ipv6 bool) ([]netip.Addr, error)
	// ipsetRestore runs ipset restore with script.
	ipsetRestore(ctx context.Context, script []byte) error
	// ipsets lists the names of the sets that exist.
	ipsets(ctx context.Context) (map[string]bool, error)
	// ipsetSizes lists the sets that exist, every family's, with their
	// number of members (-1 when ipset does not tell), from their
	// headers alone: its cost does not grow with the members.
	ipsetSizes(ctx context.Context) (map[string]int, error)
	// iptablesRestore runs iptables-restore --noflush (ip6tables- for
	// IPv6) with script.
	iptablesRestore(ctx context.Context, ipv6 bool, script []byte) error
	// iptablesSave returns iptables-save's output (ip6tables- for IPv6):
	// every table, the jumps' nat, filter and mangle among them.
	iptablesSave(ctx context.Context, ipv6 bool) ([]byte, error)
	// ensureJump adds j at the head of its chain when missing; deleteJump
	// removes every occurrence. One iptables process or more each: the
	// path taken when the jumps cannot be told from iptablesSave.
	ensureJump(ctx context.Context, ipv6 bool, j jump) error
	deleteJump(ctx context.Context, ipv6 bool, j jump) error
}

// hostKernel is kernel on the namespace of the process (or of the thread
// that calls it, for tests that run it in a network namespace).
type hostKernel struct {
	// link is kube-ipvs0 as ensureDummy last found it: adding or removing
	// an address costs one request, not two. A link deleted behind kpng's
	// back fails the next write; the full sync that follows looks again.
	link netlink.Link
}

func family(ipv6 bool) int {
	if ipv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func (k *hostKernel) dummy() (netlink.Link, error) {
	if k.link != nil {
		return k.link, nil
	}
	l, err := netlink.LinkByName(DummyInterface)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, nil
	}
	return l, err
}

func (k *hostKernel) ensureDummy() error {
	k.link = nil
	l, err := k.dummy()
	if err != nil {
		return err
	}
	if l != nil {
		k.link = l
		return nil
	}
	// Left down, as kube-proxy leaves it: its addresses are still local
	// (so IPVS serves them), but the node announces none of them.
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: DummyInterface}}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create %s: %w", DummyInterface, err)
	}
	k.link, err = k.dummy()
	return err
}

func (k *hostKernel) dummyAddrs(ipv6 bool) ([]netip.Addr, error) {
	l, err := k.dummy()
	if err != nil || l == nil {
		return nil, err
	}
	addrs, err := netlink.AddrList(l, family(ipv6))
	if err != nil {
		return nil, fmt.Errorf("list %s's addresses: %w", DummyInterface, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

func hostPrefix(a netip.Addr) *netlink.Addr {
	p := netip.PrefixFrom(a, a.BitLen())
	n := &netlink.Addr{IPNet: netlinkPrefix(p)}
	if a.Is6() {
		n.Flags = unix.IFA_F_NODAD
	}
	return n
}

func (k *hostKernel) addAddr(a netip.Addr) error {
	l, err := k.dummy()
	if err != nil {
		return err
	}
	if l == nil {
		return fmt.Errorf("%s is missing", DummyInterface)
	}
	if err := netlink.AddrAdd(l, hostPrefix(a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add %s to %s: %w", a, DummyInterface, err)
	}
	return nil
}

func (k *hostKernel) delAddr(a netip.Addr) error {
	l, err := k.dummy()
	if err != nil || l == nil {
		return err
	}
	if err := netlink.AddrDel(l, hostPrefix(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("remove %s from %s: %w", a, DummyInterface, err)
	}
	return nil
}

func (k *hostKernel) nodeAddrs(ipv6 bool) ([]netip.Addr, error) {
	l, err := k.dummy()
	if err != nil {
		return nil, err
	}
	skip := -1
	if l != nil {
		skip = l.Attrs().Index
	}
	addrs, err := netlink.AddrList(nil, family(ipv6))
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.LinkIndex == skip {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, ip)
	}
	return out, nil
}

func run(ctx context.Context, stdin []byte, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (*hostKernel) ipsetRestore(ctx context.Context, script []byte) error {
	if len(script) == 0 {
		return nil
	}
	return run(ctx, script, "ipset", "restore")
}

func (*hostKernel) ipsets(ctx context.Context) (map[string]bool, error) {
	out, err := exec.CommandContext(ctx, "ipset", "list", "-n").Output()
	if err != nil {
		return nil, fmt.Errorf("ipset list -n: %w", err)
	}
	m := map[string]bool{}
	for _, s := range strings.Fields(string(out)) {
		m[s] = true
	}
	return m, nil
}

func (*hostKernel) ipsetSizes(ctx context.Context) (map[string]int, error) {
	out, err := exec.CommandContext(ctx, "ipset", "list", "-t").Output()
	if err != nil {
		return nil, fmt.Errorf("ipset list -t: %w", err)
	}
	return parseIPSetHeaders(out), nil
}

// parseIPSetHeaders reads `ipset list -t`: a "Name: " line starts each
// set, whose "Number of entries: " line (ipset 6.30 and later) is its
// size.
func parseIPSetHeaders(out []byte) map[string]int {
	m := map[string]int{}
	name := ""
	for _, line := range strings.Split(string(out), "\n") {
		if n, ok := strings.CutPrefix(line, "Name: "); ok {
			name = strings.TrimSpace(n)
			m[name] = -1
			continue
		}
		if n, ok := strings.CutPrefix(line, "Number of entries: "); ok && name != "" {
			if v, err := strconv.Atoi(strings.TrimSpace(n)); err == nil {
				m[name] = v
			}
		}
	}
	return m
}

func iptablesCmd(ipv6 bool) string {
	if ipv6 {
		return "ip6tables"
	}
	return "iptables"
}

func (*hostKernel) iptablesRestore(ctx context.Context, ipv6 bool, script []byte) error {
	return run(ctx, script, iptablesCmd(ipv6)+"-restore", "-w", "5", "--noflush")
}

func (*hostKernel) iptablesSave(ctx context.Context, ipv6 bool) ([]byte, error) {
	// iptables-save takes one table or all: all, in one process.
	name := iptablesCmd(ipv6) + "-save"
	out, err := exec.CommandContext(ctx, name).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(exit.Stderr)))
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

func jumpArgv(ipv6 bool, op string, j jump) []string {
	return append([]string{iptablesCmd(ipv6), "-w", "5", "-t", j.table, op, j.chain}, j.args...)
}

func (*hostKernel) ensureJump(ctx context.Context, ipv6 bool, j jump) error {
	if run(ctx, nil, jumpArgv(ipv6, "-C", j)...) == nil {
		return nil
	}
	return run(ctx, nil, jumpArgv(ipv6, "-I", j)...)
}

func (*hostKernel) deleteJump(ctx context.Context, ipv6 bool, j jump) error {
	for run(ctx, nil, jumpArgv(ipv6, "-C", j)...) == nil {
		if err := run(ctx, nil, jumpArgv(ipv6, "-D", j)...); err != nil {
			return err
		}
	}
	return nil
}
