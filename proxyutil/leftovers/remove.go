package leftovers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink"
)

// ipvsDummy is the interface kube-proxy's ipvs mode binds service IPs to.
const ipvsDummy = "kube-ipvs0"

// Removed says what Remove removed.
type Removed struct {
	// Iptables lists "<command> <table> <chain>" for each chain removed.
	Iptables []string
	// NftTables lists "<family> kube-proxy" for each table removed.
	NftTables []string
	// IPVSDummy is true when kube-ipvs0 was deleted.
	IPVSDummy bool
	// IPVSServices is true when IPVS's virtual servers were cleared.
	IPVSServices bool
}

// Empty reports whether nothing was found to remove.
func (r Removed) Empty() bool {
	return len(r.Iptables) == 0 && len(r.NftTables) == 0 && !r.IPVSDummy && !r.IPVSServices
}

// iptablesCommands are the save and restore commands of each iptables
// variant and family; a variant whose commands are missing is skipped.
var iptablesCommands = [][2]string{
	{"iptables-nft-save", "iptables-nft-restore"},
	{"ip6tables-nft-save", "ip6tables-nft-restore"},
	{"iptables-legacy-save", "iptables-legacy-restore"},
	{"ip6tables-legacy-save", "ip6tables-legacy-restore"},
}

// Keep names kube-proxy's objects that Remove leaves alone because the
// running backend builds its dataplane from the same ones.
type Keep struct {
	// IPVS keeps kube-ipvs0 and IPVS's virtual servers: a backend in
	// kube-proxy's ipvs mode's shape uses them, and removes the virtual
	// servers it does not want itself.
	IPVS bool
}

// Remove removes kube-proxy's leftovers in the current network namespace,
// everything it finds of every mode but what keep names, and says what it
// removed. It goes on past an error, so that one failing part does not keep
// the others, and returns all errors joined.
func Remove(ctx context.Context, keep ...Keep) (Removed, error) {
	keepIPVS := false
	for _, k := range keep {
		keepIPVS = keepIPVS || k.IPVS
	}
	var r Removed
	var errs []error
	for _, cmds := range iptablesCommands {
		removed, err := removeIptables(ctx, cmds[0], cmds[1])
		r.Iptables = append(r.Iptables, removed...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, family := range []string{"ip", "ip6"} {
		removed, err := removeNftTable(ctx, family)
		if removed {
			r.NftTables = append(r.NftTables, family+" kube-proxy")
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if keepIPVS {
		return r, errors.Join(errs...)
	}
	var err error
	if r.IPVSServices, err = clearIPVS(ctx); err != nil {
		errs = append(errs, err)
	}
	if r.IPVSDummy, err = removeIPVSDummy(); err != nil {
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// removeIptables removes kube-proxy's chains from every table of one
// iptables variant and family.
func removeIptables(ctx context.Context, save, restore string) ([]string, error) {
	if _, err := exec.LookPath(save); err != nil {
		return nil, nil // this variant is not installed: nothing of it to remove
	}
	if _, err := exec.LookPath(restore); err != nil {
		return nil, nil
	}
	var removed []string
	var errs []error
	for _, table := range Tables {
		if !legacyTableExists(save, table) {
			continue
		}
		out, err := run(ctx, nil, save, "-t", table)
		if err != nil {
			if tableMissing(out) {
				continue // the table does not exist in this variant: nothing in it
			}
			errs = append(errs, fmt.Errorf("%s -t %s: %w: %s", save, table, err, firstLine(out)))
			continue
		}
		in, chains := IptablesRestore(table, out)
		if in == nil {
			continue
		}
		if out, err := run(ctx, in, restore, "--noflush", "-w", "5"); err != nil {
			errs = append(errs, fmt.Errorf("%s: removing kube-proxy's %s chains: %w: %s", restore, table, err, firstLine(out)))
			continue
		}
		for _, c := range chains {
			removed = append(removed, save[:strings.LastIndex(save, "-")]+" "+table+" "+c)
		}
	}
	return removed, errors.Join(errs...)
}

// legacyTableExists reports, for a legacy variant's save command, whether
// the kernel has that table (its /proc names file lists the tables in use):
// listing a table that does not exist would load the legacy iptables
// modules and create it, on a node that may never have used them. Other
// variants always answer true.
func legacyTableExists(save, table string) bool {
	names := ""
	switch save {
	case "iptables-legacy-save":
		names = "/proc/thread-self/net/ip_tables_names" // this thread's namespace
	case "ip6tables-legacy-save":
		names = "/proc/thread-self/net/ip6_tables_names"
	default:
		return true
	}
	b, err := os.ReadFile(names)
	if err != nil {
		return false
	}
	for _, t := range strings.Fields(string(b)) {
		if t == table {
			return true
		}
	}
	return false
}

// removeNftTable deletes the kube-proxy table of family, if there is one.
func removeNftTable(ctx context.Context, family string) (bool, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return false, nil // no nft: kube-proxy's nftables mode cannot have run here
	}
	if _, err := run(ctx, nil, "nft", "list", "table", family, "kube-proxy"); err != nil {
		return false, nil // no such table
	}
	if out, err := run(ctx, nil, "nft", "delete", "table", family, "kube-proxy"); err != nil {
		return false, fmt.Errorf("nft delete table %s kube-proxy: %w: %s", family, err, firstLine(out))
	}
	return true, nil
}

// clearIPVS clears IPVS's virtual servers, as kube-proxy's ipvs cleanup
// does, when the kernel has IPVS and some exist. It needs ipvsadm; without
// it, existing virtual servers are an error that says so.
func clearIPVS(ctx context.Context) (bool, error) {
	// The calling thread's network namespace: /proc/net is the process's
	// (its main thread's), which a thread that entered another namespace
	// does not see.
	b, err := os.ReadFile("/proc/thread-self/net/ip_vs")
	if err != nil {
		return false, nil // no IPVS in this kernel (or this namespace): nothing to clear
	}
	// The file has three header lines; more means virtual servers.
	if len(bytes.Split(bytes.TrimSpace(b), []byte("\n"))) <= 3 {
		return false, nil
	}
	if _, err := exec.LookPath("ipvsadm"); err != nil {
		return false, errors.New("IPVS virtual servers exist (kube-proxy's ipvs mode ran here?) but ipvsadm is not installed to clear them: run ipvsadm -C")
	}
	if out, err := run(ctx, nil, "ipvsadm", "-C"); err != nil {
		return false, fmt.Errorf("ipvsadm -C: %w: %s", err, firstLine(out))
	}
	return true, nil
}

// removeIPVSDummy deletes kube-ipvs0, the dummy interface that holds the
// service IPs in kube-proxy's ipvs mode: left there, the node would answer
// for every cluster IP itself.
func removeIPVSDummy() (bool, error) {
	link, err := netlink.LinkByName(ipvsDummy)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return false, nil
		}
		return false, fmt.Errorf("looking for %s: %w", ipvsDummy, err)
	}
	if link.Type() != "dummy" {
		return false, nil // someone else's interface of that name: not ours to delete
	}
	if err := netlink.LinkDel(link); err != nil {
		return false, fmt.Errorf("deleting %s: %w", ipvsDummy, err)
	}
	return true, nil
}

func run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.Bytes(), err
	}
	return out, nil
}

// tableMissing reports whether iptables-save failed because the table does
// not exist (legacy iptables without the module, or an nft ruleset without
// that table).
func tableMissing(stderr []byte) bool {
	s := string(stderr)
	return strings.Contains(s, "does not exist") || strings.Contains(s, "Table does not exist")
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
