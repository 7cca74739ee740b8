// Package nfmonitor tells a backend, within milliseconds, that someone else
// changed its netfilter rules: it subscribes to the kernel's nf_tables
// change notifications (the source of `nft monitor`), which report every
// table, chain, rule, set and element that a committed transaction added or
// deleted, and which process committed it. nftables and iptables-nft both
// write through nf_tables, so one watcher serves both backends; iptables-
// legacy has no notifications, and its backend keeps its periodic check.
//
// A backend's own writes are not "someone else": writes from this process
// (netlink) are recognised by its pid, and writes through a command it runs
// (nft -f, iptables-restore) by the pid it registers with Started.
package nfmonitor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Event is one object a transaction added or deleted.
type Event struct {
	// Op is "new" or "del".
	Op string
	// Kind is "table", "chain", "rule", "set" or "element".
	Kind string
	// Family is the table's family: unix.NFPROTO_IPV4, _IPV6, _INET, ...
	Family uint8
	// Table is the table's name; Chain the chain of a chain or rule event;
	// Set the set of a set or element event.
	Table, Chain, Set string
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s family %d table %s", e.Op, e.Kind, e.Family, e.Table)
	if e.Chain != "" {
		s += " chain " + e.Chain
	}
	if e.Set != "" {
		s += " set " + e.Set
	}
	return s
}

// ownWriters are the pids of commands this process started to write rules
// (see Started), with when they were registered, and the netlink port ids
// of the sockets it writes through itself (see OwnSocket).
var ownWriters = struct {
	sync.Mutex
	pids    map[uint32]time.Time
	sockets map[uint32]int // port id: how many open sockets have it
}{pids: map[uint32]time.Time{}, sockets: map[uint32]int{}}

// ownWriterTTL is how long a registered pid is taken as ours: far longer
// than a restore runs, short enough that a reused pid is not.
const ownWriterTTL = time.Minute

// Started registers pid as a command this process runs to write rules, so
// that its transactions are not reported as someone else's. Call it between
// exec.Cmd's Start and Wait.
func Started(pid int) {
	ownWriters.Lock()
	defer ownWriters.Unlock()
	now := time.Now()
	for p, t := range ownWriters.pids {
		if now.Sub(t) > ownWriterTTL {
			delete(ownWriters.pids, p)
		}
	}
	ownWriters.pids[uint32(pid)] = now
}

// RunOwn runs cmd, a command that writes rules (nft -f -, iptables-restore),
// with input on its standard input, and waits for it. It registers the
// command (Started) before the command can read a byte of its input: such a
// command commits nothing before it has read its input, so the watcher
// cannot hear of its transaction before knowing it as this process's own,
// however late this goroutine runs after the fork on a loaded machine.
// cmd.Stdin must be unset.
func RunOwn(cmd *exec.Cmd, input io.Reader) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdin = pr
	err = cmd.Start()
	pr.Close() // the child's copy stays open
	if err != nil {
		pw.Close()
		return err
	}
	Started(cmd.Process.Pid)
	// A command that fails early stops reading: the copy ends with EPIPE
	// and Wait tells why.
	_, copyErr := io.Copy(pw, input)
	pw.Close()
	if err := cmd.Wait(); err != nil {
		return err
	}
	if copyErr != nil {
		return fmt.Errorf("writing the input of %s: %w", cmd.Path, copyErr)
	}
	return nil
}

// OwnSocket registers the netlink port id of a socket this process writes
// rules through (netlink.Conn's PID), so that its transactions are not
// reported as someone else's even where the kernel's pid for the writer
// means nothing here: in a container with a PID namespace of its own, the
// kernel names the writer by its pid in the host's namespace. The returned
// func unregisters it; call it when the socket is closed.
func OwnSocket(portID uint32) (forget func()) {
	ownWriters.Lock()
	defer ownWriters.Unlock()
	ownWriters.sockets[portID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			ownWriters.Lock()
			defer ownWriters.Unlock()
			if ownWriters.sockets[portID]--; ownWriters.sockets[portID] <= 0 {
				delete(ownWriters.sockets, portID)
			}
		})
	}
}

// isOwn reports whether a transaction was committed on this process's
// behalf. The kernel gives two names for the writer: pid, the committing
// task (a thread id, in the host's PID namespace), and portID, the netlink
// port of the socket the transaction came through. In the host's PID
// namespace a write from any of this process's threads is known by pid; in
// a PID namespace of its own (a container) by the port id: that of a socket
// registered with OwnSocket, or of a command registered with Started (a
// process's first netlink socket gets its pid, as this namespace counts,
// for port id).
func isOwn(pid, portID uint32) bool {
	if pid == uint32(os.Getpid()) {
		return true
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", pid)); err == nil {
		return true
	}
	ownWriters.Lock()
	defer ownWriters.Unlock()
	if ownWriters.sockets[portID] > 0 {
		return true
	}
	for _, id := range [2]uint32{pid, portID} {
		if t, ok := ownWriters.pids[id]; ok && time.Since(t) <= ownWriterTTL {
			return true
		}
	}
	return false
}

// Watcher receives nf_tables notifications in the network namespace it was
// opened in.
type Watcher struct {
	conn *netlink.Conn
}

// Open subscribes to nf_tables notifications in the current network
// namespace. It fails without CAP_NET_ADMIN.
func Open() (*Watcher, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nf_tables notifications: %w", err)
	}
	if err := c.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		c.Close()
		return nil, fmt.Errorf("nf_tables notifications: joining the group: %w", err)
	}
	// Bursts of element notifications (a cold sync writes thousands) must
	// not overflow the socket; if they still do, Run says so.
	_ = c.SetReadBuffer(8 << 20)
	return &Watcher{conn: c}, nil
}

// Close ends the subscription; a Run in progress returns.
func (w *Watcher) Close() error { return w.conn.Close() }

// Run reads notifications until ctx ends or the watcher is closed. For each
// transaction committed by another process in which match accepted at least
// one event, it calls changed with those events. When the kernel dropped
// notifications (the socket overflowed), it calls changed with nil: what
// was lost may have been someone else's. It returns nil when ctx ends.
func (w *Watcher) Run(ctx context.Context, match func(Event) bool, changed func([]Event)) error {
	stop := context.AfterFunc(ctx, func() { w.conn.Close() })
	defer stop()
	var pending []Event
	for {
		msgs, err := w.conn.Receive()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, unix.ENOBUFS) {
				pending = nil
				changed(nil)
				continue
			}
			return fmt.Errorf("nf_tables notifications: %w", err)
		}
		for _, m := range msgs {
			ev, gen, ok := decode(m)
			switch {
			case !ok:
			case gen != nil:
				if len(pending) > 0 && !isOwn(gen.pid, gen.portID) {
					changed(pending)
				}
				pending = nil
			case match(ev):
				pending = append(pending, ev)
			}
		}
	}
}

// generation is the end of a committed transaction: the writer's pid (in
// the host's PID namespace) and the netlink port id of its socket.
type generation struct{ pid, portID uint32 }

const subsysNFTables = 10 // NFNL_SUBSYS_NFTABLES

// decode reads one notification: an object event, or a generation (the
// end of a transaction, with the committing process's pid).
func decode(m netlink.Message) (Event, *generation, bool) {
	if uint16(m.Header.Type)>>8 != subsysNFTables || len(m.Data) < 4 {
		return Event{}, nil, false
	}
	typ := uint16(m.Header.Type) & 0xff
	ev := Event{Family: m.Data[0]}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return Event{}, nil, false
	}
	ad.ByteOrder = binary.BigEndian // nf_tables puts its numbers in network order
	if typ == unix.NFT_MSG_NEWGEN {
		g := &generation{portID: m.Header.PID}
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_PROC_PID {
				g.pid = ad.Uint32()
			}
		}
		return Event{}, g, ad.Err() == nil
	}
	var nameAttr uint16 // the chain's or set's name attribute, if any
	switch typ {
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE:
		ev.Kind = "table"
	case unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN:
		ev.Kind, nameAttr = "chain", unix.NFTA_CHAIN_NAME
	case unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE:
		ev.Kind, nameAttr = "rule", unix.NFTA_RULE_CHAIN
	case unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET:
		ev.Kind, nameAttr = "set", unix.NFTA_SET_NAME
	case unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM:
		ev.Kind, nameAttr = "element", unix.NFTA_SET_ELEM_LIST_SET
	default:
		return Event{}, nil, false
	}
	switch typ {
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_NEWRULE, unix.NFT_MSG_NEWSET, unix.NFT_MSG_NEWSETELEM:
		ev.Op = "new"
	default:
		ev.Op = "del"
	}
	for ad.Next() {
		switch ad.Type() {
		case 1: // NFTA_{TABLE_NAME,CHAIN_TABLE,RULE_TABLE,SET_TABLE,SET_ELEM_LIST_TABLE}
			ev.Table = ad.String()
		case nameAttr:
			if ev.Kind == "chain" || ev.Kind == "rule" {
				ev.Chain = ad.String()
			} else {
				ev.Set = ad.String()
			}
		}
	}
	return ev, nil, ad.Err() == nil
}

// WatchForRepairs hears, in the background until ctx ends, of the changes
// other processes make to what match accepts, and asks for their repair:
// it calls repair with the events (nil when notifications were lost, so
// that anything may have changed), logs the change as one of what (say,
// "the nftables tables"), then requests a resync on resyncNow without
// blocking (a request already pending stands for this one). It fails only
// when the subscription cannot be opened.
func WatchForRepairs(ctx context.Context, log logr.Logger, what string, match func(Event) bool, repair func([]Event), resyncNow chan<- struct{}) error {
	w, err := Open()
	if err != nil {
		return err
	}
	go func() {
		defer w.Close()
		err := w.Run(ctx, match, func(evs []Event) {
			first := "notifications lost"
			if len(evs) > 0 {
				first = evs[0].String()
			}
			log.Info("A change of "+what+" behind kpng's back; repairing it now", "changes", len(evs), "first", first)
			repair(evs)
			select {
			case resyncNow <- struct{}{}:
			default: // a request is pending already
			}
		})
		if err != nil {
			log.Error(err, "Watching "+what+" stopped; repairs wait for the periodic sync")
		}
	}()
	return nil
}
