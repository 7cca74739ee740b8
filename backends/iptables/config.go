package iptables

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/kpng/kpng/proxyutil/host"
)

// Config is the backend's configuration: kube-proxy's iptables-mode flags
// (host.Config, and the iptables-only ones).
type Config struct {
	host.Config
	// LocalhostNodePorts: IPv4 node ports also answer on 127.0.0.0/8
	// (route_localnet=1, with kube-proxy's CVE-2020-8558 protection).
	LocalhostNodePorts bool
	// Mode is the iptables variant: auto, nft or legacy.
	Mode string
	// LockWait bounds the wait for the xtables lock.
	LockWait time.Duration
}

// DefaultConfig is kube-proxy's defaults (v1alpha1). FullSyncPeriod is how
// often a periodic sync rewrites every chain (kube-proxy: hourly); the
// periodic syncs in between only check the canary.
func DefaultConfig() Config {
	return Config{
		Config:             host.Defaults(),
		LocalhostNodePorts: true,
		Mode:               "auto",
		LockWait:           5 * time.Second,
	}
}

// BindFlags adds the flags to fs, with c's values as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Config.BindFlags(fs)
	fs.IntVar(&c.MasqueradeBit, "masquerade-bit", c.MasqueradeBit, "the fwmark bit (0-31) that marks packets to SNAT (kube-proxy: --iptables-masquerade-bit)")
	fs.BoolVar(&c.LocalhostNodePorts, "localhost-nodeports", c.LocalhostNodePorts, "accept IPv4 node ports on 127.0.0.0/8 (sets route_localnet=1, with kube-proxy's CVE-2020-8558 protection)")
	fs.BoolVar(&c.LocalhostNodePorts, "iptables-localhost-nodeports", c.LocalhostNodePorts, "kube-proxy's name of --localhost-nodeports")
	fs.StringVar(&c.Mode, "iptables-mode", c.Mode, "the iptables variant: auto (detect as kube-proxy's image does), nft or legacy")
	fs.DurationVar(&c.LockWait, "iptables-lock-wait", c.LockWait, "how long to wait for the xtables lock")
}

// validate checks c.
func (c *Config) validate() error {
	var errs []error
	if c.LockWait < time.Second {
		errs = append(errs, fmt.Errorf("--iptables-lock-wait %v: must be at least 1s (iptables waits whole seconds)", c.LockWait))
	}
	switch c.Mode {
	case "auto", "nft", "legacy":
	default:
		errs = append(errs, fmt.Errorf("--iptables-mode %q: must be auto, nft or legacy", c.Mode))
	}
	return errors.Join(append(errs, c.Config.Validate())...)
}

// localDetector is the match that tells traffic from this node's pods:
// ifLocal and ifNotLocal are iptables match arguments; both empty when the
// mode cannot tell (no CIDR known).
type localDetector struct {
	ifLocal, ifNotLocal []string
}

func (d localDetector) implemented() bool { return len(d.ifLocal) > 0 }

// localMatch renders how to tell local traffic as iptables match
// arguments.
func localMatch(l host.LocalTraffic) localDetector {
	switch {
	case l.CIDR.IsValid():
		return localDetector{ifLocal: []string{"-s", l.CIDR.String()}, ifNotLocal: []string{"!", "-s", l.CIDR.String()}}
	case l.Interface != "":
		return localDetector{ifLocal: []string{"-i", l.Interface}, ifNotLocal: []string{"!", "-i", l.Interface}}
	case l.InterfacePrefix != "":
		i := strings.TrimSuffix(l.InterfacePrefix, "+") + "+"
		return localDetector{ifLocal: []string{"-i", i}, ifNotLocal: []string{"!", "-i", i}}
	}
	return localDetector{}
}
