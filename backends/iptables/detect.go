package iptables

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
)

// detectVariant chooses nft or legacy as kube-proxy's image does
// (iptables-wrapper), with the host's binaries.
func detectVariant(ctx context.Context) (variant, error) {
	return detect(ctx, execSave)
}

// saveFunc runs an iptables-save binary with args.
type saveFunc func(ctx context.Context, name string, args ...string) ([]byte, error)

func execSave(ctx context.Context, name string, args ...string) ([]byte, error) {
	if _, err := exec.LookPath(name); err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, name, args...).Output()
}

// detect decides the variant in iptables-wrapper's order. Since Kubernetes
// 1.17 kubelet creates KUBE-IPTABLES-HINT (or KUBE-KUBELET-CANARY) in the
// mangle table of the variant it uses, so that chain decides first: in the
// nft variant's mangle tables, then anywhere in the legacy variant's
// tables (the whole save, since "iptables-legacy-save -t mangle" would
// create the legacy mangle table). Without kubelet's chains (a host without
// kubelet, or not yet started), the variant whose tables hold more rules is
// the one the host uses (the wrapper's rule before kubelet's hint existed);
// with as many in each, the variant of the default iptables binary
// (`iptables --version` says "nf_tables" or "legacy").
func detect(ctx context.Context, save saveFunc) (variant, error) {
	nft, legacy := variants["nft"], variants["legacy"]
	var nftWorks, legacyWorks bool
	for _, name := range []string{nft.save4, nft.save6} {
		out, err := save(ctx, name, "-t", "mangle")
		if err != nil {
			continue
		}
		nftWorks = true
		if hasKubeletChains(out) {
			return nft, nil
		}
	}
	legacyRules := 0
	for _, name := range []string{legacy.save4, legacy.save6} {
		out, err := save(ctx, name)
		if err != nil {
			continue
		}
		legacyWorks = true
		if hasKubeletChains(out) {
			return legacy, nil
		}
		legacyRules += countRules(out)
	}
	switch {
	case !nftWorks && !legacyWorks:
		return variant{}, errors.New("neither iptables-nft-save nor iptables-legacy-save works: is iptables installed?")
	case !legacyWorks:
		return nft, nil
	case !nftWorks:
		return legacy, nil
	}
	nftRules := 0
	for _, name := range []string{nft.save4, nft.save6} {
		if out, err := save(ctx, name); err == nil {
			nftRules += countRules(out)
		}
	}
	switch {
	case legacyRules > nftRules:
		return legacy, nil
	case nftRules > legacyRules:
		return nft, nil
	}
	out, err := exec.CommandContext(ctx, "iptables", "--version").Output()
	if err == nil && strings.Contains(string(out), "legacy") {
		return legacy, nil
	}
	return nft, nil
}

// hasKubeletChains reports whether iptables-save output declares one of
// the chains kubelet creates to tell containers which variant it uses.
func hasKubeletChains(save []byte) bool {
	for _, l := range bytes.Split(save, []byte{'\n'}) {
		if bytes.HasPrefix(l, []byte(":KUBE-IPTABLES-HINT ")) || bytes.HasPrefix(l, []byte(":KUBE-KUBELET-CANARY ")) {
			return true
		}
	}
	return false
}

// countRules counts the rules ("-A" lines) of iptables-save output.
func countRules(save []byte) int {
	n := 0
	for _, l := range bytes.Split(save, []byte{'\n'}) {
		if bytes.HasPrefix(l, []byte("-A ")) {
			n++
		}
	}
	return n
}
