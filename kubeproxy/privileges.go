package kubeproxy

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// netAdminBackends are the compiled-in backends that program the kernel's
// packet filter, by what they program: without CAP_NET_ADMIN each of them
// fails, but with messages that do not say why (nft's "Could not process
// rule: Operation not permitted" on its first table, iptables' "unable to
// initialize table" or "is iptables installed?").
var netAdminBackends = map[string]string{"nft": "nftables", "iptables": "iptables"}

// capNetAdmin is CAP_NET_ADMIN's bit in the capability sets.
const capNetAdmin = 12

// checkNetAdmin fails, saying exactly why, when backend name needs
// CAP_NET_ADMIN and the process's effective capabilities lack it. When
// they cannot be read, the backend is left to try.
func checkNetAdmin(name string) error {
	what, ok := netAdminBackends[name]
	if !ok {
		return nil
	}
	caps, err := effectiveCaps("/proc/self/status")
	if err != nil || caps&(1<<capNetAdmin) != 0 {
		return nil
	}
	who := "run as root"
	if os.Geteuid() == 0 {
		who = "it runs as root but without the capability: grant it"
	}
	return fmt.Errorf("%s: %s: operation not permitted: kpng needs CAP_NET_ADMIN (%s)", name, what, who)
}

// effectiveCaps reads the CapEff line of a /proc/<pid>/status file.
func effectiveCaps(status string) (uint64, error) {
	f, err := os.Open(status)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no CapEff line", status)
}
