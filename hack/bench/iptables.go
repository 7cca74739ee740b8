package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// Both iptables proxies run on one iptables variant, the same for both, so
// that their figures compare like with like. The host's default `iptables`
// may be either; its nft variant (iptables-nft-restore) takes many minutes
// to load 5,000 services or more (docs/performance.md, "iptables backend"),
// so the bench uses the legacy variant unless told otherwise.
//
// kube-proxy runs the `iptables`, `iptables-save` and `iptables-restore` of
// its PATH: the bench puts first in its PATH a directory whose links of
// those names lead to the variant's binaries. kpng's backend is told the
// variant (--iptables-mode). After the run the bench looks where each
// proxy's rules are, and the page says it.

// iptablesTools are the programs a proxy runs by these names.
var iptablesTools = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

// variantTool is tool's name in the variant: iptables-legacy-save for
// iptables-save.
func variantTool(tool, variant string) string {
	base, suffix, ok := strings.Cut(tool, "-")
	if !ok {
		return tool + "-" + variant
	}
	return base + "-" + variant + "-" + suffix
}

// iptablesPathDir makes dir/iptables-<variant>, holding a link named after
// each of iptablesTools to the variant's binary, and returns it. The
// xtables multi-binary goes by the name it is run as, so `iptables` there
// is the variant's.
func iptablesPathDir(dir, variant string) (string, error) {
	d := filepath.Join(dir, "iptables-"+variant)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	for _, tool := range iptablesTools {
		target, err := lookSbin(variantTool(tool, variant))
		if err != nil {
			return "", fmt.Errorf("iptables variant %s: %w", variant, err)
		}
		link := filepath.Join(d, tool)
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return "", err
		}
	}
	return d, nil
}

// lookSbin finds a program in PATH, or in the sbin directories that a
// sudo'ed PATH may lack.
func lookSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH, /usr/sbin or /sbin", name)
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// proxyEnv is what a proxy's environment gets: the variant's directory
// first in PATH, and an xtables lock file of its own. The legacy variant
// serialises every iptables command of the host on one lock file
// (/run/xtables.lock, outside network namespaces): with a shared lock each
// proxy's restores would wait for the other's, and for whatever else on
// the machine runs iptables.
func proxyEnv(pathDir, lockFile string) []string {
	return []string{"PATH=" + pathDir + ":" + os.Getenv("PATH"), "XTABLES_LOCKFILE=" + lockFile}
}

// rulesWhere tells where a proxy's rules are at the end of the run: how
// many rules the legacy nat table of its namespace holds, and which
// nf_tables tables there are (iptables-nft's are "ip nat", "ip filter"...).
func rulesWhere(ns string) (legacyNATRules int, nftTables []string, err error) {
	out, err := inNamespace(ns, "iptables-legacy-save", "-t", "nat")
	if err != nil {
		return 0, nil, err
	}
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "-A ") {
			legacyNATRules++
		}
	}
	out, err = inNamespace(ns, "nft", "list", "tables")
	if err != nil {
		return legacyNATRules, nil, err
	}
	nftTables = parseNftTables(out)
	return legacyNATRules, nftTables, nil
}

// saveRules writes the rules of namespace ns as they are at the end of the
// run, the legacy nat table to base+".iptables" (iptables-legacy-save) and
// the nf_tables ruleset to base+".nft" (nft list ruleset), so that each
// proxy's ruleset can be loaded again alone (iptables-restore, nft -f) to
// compare what the kernel takes to load them.
func saveRules(ns, base string, legacy, nft bool) error {
	save := func(ext, name string, args ...string) error {
		out, err := inNamespace(ns, name, args...)
		if err != nil {
			return err
		}
		return os.WriteFile(base+ext, []byte(out), 0o644)
	}
	if legacy {
		if err := save(".iptables", "iptables-legacy-save", "-t", "nat"); err != nil {
			return err
		}
	}
	if nft {
		return save(".nft", "nft", "list", "ruleset")
	}
	return nil
}

// reloadRules loads the rulesets saveRules wrote at base into namespace
// ns, created empty for it and deleted after, one after the other, and
// returns what the loading commands took (their own CPU time: nft's or
// iptables-restore's, user and system).
func reloadRules(ns, base string, legacy, nft bool) (*RulesetLoad, error) {
	_ = netnstest.Delete(ns) // a leftover of a killed run
	n, err := netnstest.Create(ns)
	if n != nil {
		defer netnstest.Delete(ns)
	}
	if err != nil {
		return nil, err
	}
	l := &RulesetLoad{}
	load := func(file, name string, args ...string) error {
		bin, err := lookSbin(name)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, bin}, append(args, file)...)...)
		cmd.Stderr = &stderr
		began := time.Now()
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("loading %s alone: %s: %w: %s", file, name, err, bytes.TrimSpace(stderr.Bytes()))
		}
		l.WallSeconds += time.Since(began).Seconds()
		// `ip netns exec` execs the command: the rusage is its own.
		l.SysSeconds += cmd.ProcessState.SystemTime().Seconds()
		l.UserSeconds += cmd.ProcessState.UserTime().Seconds()
		return nil
	}
	if legacy {
		if err := load(base+".iptables", "iptables-legacy-restore"); err != nil {
			return nil, err
		}
	}
	if nft {
		if err := load(base+".nft", "nft", "-f"); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// parseNftTables reads `nft list tables`: "table ip nat" lines.
func parseNftTables(out string) []string {
	var tables []string
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
			tables = append(tables, rest)
		}
	}
	return tables
}

// inNamespace runs a command in namespace ns, for at most two minutes.
func inNamespace(ns, name string, args ...string) (string, error) {
	bin, err := lookSbin(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}
