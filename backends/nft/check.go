package nft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The periodic check. Reading a whole table back (`nft -j list table`)
// takes seconds at 10,000 services, so the periodic sync (every
// --sync-period) only checks what the usual hands change behind kpng's back
// ("nft flush ruleset", "nft delete table", "nft flush table", a flushed
// base chain): that the table exists and that each chain of the fixed part
// holds the rules kpng wrote, by number. That is a few netlink round trips,
// whatever the number of services. When the check fails the sync reads the
// table and repairs it; otherwise a full read-and-repair runs once per
// --full-sync-period, as kube-proxy's full sync runs hourly.

// ruleCounter reports, for each of the named chains of the table, how many
// rules it holds; a chain that does not exist is absent from counts, and
// exists is false when the table itself does not.
type ruleCounter func(ctx context.Context, chains []string) (counts map[string]int, exists bool, err error)

// checkFixed compares the kernel with the fixed part kpng last wrote. It
// returns what differs ("" when nothing does).
func (t *table) checkFixed(ctx context.Context) (string, error) {
	fixed := t.parts[fixedOwner]
	if fixed == nil || t.count == nil {
		return "nothing to compare with", nil
	}
	names := make([]string, len(fixed.chains))
	for i, c := range fixed.chains {
		names[i] = c.name
	}
	counts, exists, err := t.count(ctx, names)
	if err != nil {
		return "", err
	}
	if !exists {
		return "the table is gone", nil
	}
	for _, c := range fixed.chains {
		n, ok := counts[c.name]
		switch {
		case !ok:
			return fmt.Sprintf("chain %s is gone", c.name), nil
		case n != len(c.rules):
			return fmt.Sprintf("chain %s holds %d rules, not %d", c.name, n, len(c.rules)), nil
		}
	}
	return "", nil
}

// fakeCounter counts the rules of a knftables.Fake's chains.
func fakeCounter(f *knftables.Fake) ruleCounter {
	return func(_ context.Context, chains []string) (map[string]int, bool, error) {
		f.RLock()
		defer f.RUnlock()
		if f.Table == nil {
			return nil, false, nil
		}
		counts := map[string]int{}
		for _, name := range chains {
			if c := f.Table.Chains[name]; c != nil {
				counts[name] = len(c.Rules)
			}
		}
		return counts, true, nil
	}
}

// netlinkCounter counts rules in the kernel: one request for the table,
// then per chain one for the chain and one dump of its rules (the kernel
// finds a chain by name in a hash, so this does not grow with the table).
func netlinkCounter(fam family, table string) ruleCounter {
	var conn *netlink.Conn
	return func(ctx context.Context, chains []string) (map[string]int, bool, error) {
		if conn == nil {
			c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
			if err != nil {
				return nil, false, fmt.Errorf("netlink: %w", err)
			}
			conn = c
		}
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(10 * time.Second)
		}
		_ = conn.SetDeadline(deadline)
		counts, exists, err := countRules(conn, fam, table, chains)
		if err != nil {
			// Start afresh next time: replies may be left unread.
			conn.Close()
			conn = nil
		}
		return counts, exists, err
	}
}

func countRules(conn *netlink.Conn, fam family, table string, chains []string) (map[string]int, bool, error) {
	request := func(typ int, flags netlink.HeaderFlags, attrs func(*netlink.AttributeEncoder)) ([]netlink.Message, error) {
		ae := netlink.NewAttributeEncoder()
		ae.ByteOrder = binary.BigEndian
		attrs(ae)
		data, err := ae.Encode()
		if err != nil {
			return nil, err
		}
		return conn.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: netlink.Request | flags},
			Data:   append([]byte{fam.nfproto(), unix.NFNETLINK_V0, 0, 0}, data...),
		})
	}
	_, err := request(unix.NFT_MSG_GETTABLE, 0, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_TABLE_NAME, table)
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("netlink: getting table %s: %w", table, err)
	}
	counts := make(map[string]int, len(chains))
	for _, name := range chains {
		_, err := request(unix.NFT_MSG_GETCHAIN, 0, func(ae *netlink.AttributeEncoder) {
			ae.String(unix.NFTA_CHAIN_TABLE, table)
			ae.String(unix.NFTA_CHAIN_NAME, name)
		})
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("netlink: getting chain %s: %w", name, err)
		}
		rules, err := request(unix.NFT_MSG_GETRULE, netlink.Dump, func(ae *netlink.AttributeEncoder) {
			ae.String(unix.NFTA_RULE_TABLE, table)
			ae.String(unix.NFTA_RULE_CHAIN, name)
		})
		if err != nil {
			return nil, false, fmt.Errorf("netlink: listing the rules of chain %s: %w", name, err)
		}
		n := 0
		for _, m := range rules {
			if m.Header.Type == netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWRULE) {
				n++
			}
		}
		counts[name] = n
	}
	return counts, true, nil
}
