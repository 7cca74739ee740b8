package nft

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables/expr"
	"github.com/kpng/kpng/proxyutil/nfmonitor"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/knftables"
)

// The netlink path. The `nft` command reads the whole table into its cache
// before it runs even a one-rule transaction (with nft 1.0.6, ~50 ms at
// 10,000 services for any command that names an existing chain or set),
// so the incremental transactions are written here, as the netlink messages
// nft itself would send for them, in one batch (one kernel transaction).
// The cold sync, the resync and anything this file cannot translate still go
// through `nft`: it is the reference, and this path must produce exactly the
// state it would (netlink_e2e_test.go compares the two).

// untranslatable is an operation the netlink path does not write; its
// transaction goes through nft instead.
type untranslatable struct{ what string }

func (e *untranslatable) Error() string { return "not translated to netlink: " + e.what }

func cannot(format string, args ...any) error {
	return &untranslatable{fmt.Sprintf(format, args...)}
}

// The type numbers of nft's data types (its datatype.h), as set
// definitions carry them, and constants x/sys/unix lacks.
const (
	typeInteger     = 4
	typeIPv4Addr    = 7
	typeIPv6Addr    = 8
	typeInetService = 13
	typeVerdict     = 0xffffff00 // NFT_DATA_VERDICT

	// Registers: NFT_REG_1, NFT_REG_2 (16 bytes each), NFT_REG32_01.
	reg1, reg2, reg32_01 = 1, 2, 9

	// libnftnl's user data types (udata.h).
	udataRuleComment      = 0 // NFTNL_UDATA_RULE_COMMENT
	udataSetKeyByteorder  = 0 // NFTNL_UDATA_SET_KEYBYTEORDER
	udataSetDataByteorder = 1
	udataSetMergeElements = 2
	udataSetKeyTypeof     = 3
	udataSetDataTypeof    = 4
	udataSetDataInterval  = 6
	udataElemComment      = 0 // NFTNL_UDATA_SET_ELEM_COMMENT

	// nft's byte orders (BYTEORDER_*).
	byteorderInvalid, byteorderHost, byteorderBig = 0, 1, 2
)

// nlTable writes one table's transactions through netlink.
type nlTable struct {
	fam   family
	table string
	conn  *netlink.Conn
	// forget unregisters conn's port id as this process's own writer
	// (nfmonitor.OwnSocket).
	forget func()
	seq    uint32
	// Anonymous maps are named "__map-kpng-NONCE-N" (see anonMap), N
	// counting up from anon. The nonce is random per process: a new process
	// does not know which names its predecessor used. (The kernel names
	// nft's "__mapN", without a "-".)
	nonce string
	anon  uint64
	// dial opens the socket, in the network namespace of the calling
	// thread (a variable for tests).
	dial func() (*netlink.Conn, error)
}

func newNLTable(fam family, table string) *nlTable {
	return &nlTable{fam: fam, table: table, nonce: fmt.Sprintf("%016x", rand.Uint64()), dial: func() (*netlink.Conn, error) {
		return netlink.Dial(unix.NETLINK_NETFILTER, nil)
	}}
}

// anonName is a new anonymous map's name; an anonymous set's is the same
// with "__set" for "__map".
func (w *nlTable) anonName() string {
	w.anon++
	return "__map-kpng-" + w.nonce + "-" + strconv.FormatUint(w.anon, 10)
}

// batch is one transaction being encoded.
type batch struct {
	fam    family
	table  string
	msgs   []netlink.Message
	nextID uint32
	newIDs map[string]uint32 // sets created in this batch, by name
	// sets gives a set's definition (element keys are encoded by type).
	sets func(name string) *set
	// anonName names a new anonymous map.
	anonName func() string
}

// encode translates ops into netlink messages, or returns an
// *untranslatable error naming the first operation it cannot translate.
func (w *nlTable) encode(ops []op, sets func(string) *set) ([]netlink.Message, error) {
	b := &batch{fam: w.fam, table: w.table, newIDs: map[string]uint32{}, sets: sets, anonName: w.anonName}
	for i := 0; i < len(ops); {
		// A run of element operations on one set is one message, as one
		// nft command is: the kernel looks a set up by name by going
		// through every set of the table (one map per service port).
		if e := ops[i].elem; e != nil {
			j := i + 1
			for j < len(ops) && j-i < maxElemsPerMsg && ops[j].verb == ops[i].verb && sameSet(ops[j].elem, e) {
				j++
			}
			es := make([]*knftables.Element, 0, j-i)
			for _, o := range ops[i:j] {
				es = append(es, elemObject(*o.elem))
			}
			if err := b.elements(ops[i].verb, es); err != nil {
				return nil, err
			}
			i = j
			continue
		}
		if err := b.op(ops[i]); err != nil {
			return nil, err
		}
		i++
	}
	return b.msgs, nil
}

// setOrMap adds (with add) or deletes the set or map name.
func (b *batch) setOrMap(v verb, name string, add func() error) error {
	switch v {
	case opAdd:
		return add()
	case opDelete:
		b.delSet(name)
		return nil
	}
	return cannot("set or map operation %d", v)
}

// maxElemsPerMsg bounds the elements of one message: their list is one
// netlink attribute, of at most 64 KiB.
const maxElemsPerMsg = 256

// sameSet reports whether o (nil: not an element) is an element of e's
// set or map.
func sameSet(o, e *elem) bool {
	return o != nil && o.set == e.set && o.isMap == e.isMap
}

func (b *batch) op(o op) error {
	switch obj := o.object().(type) {
	case *knftables.Chain:
		if obj.Type != nil || obj.Hook != nil || obj.Priority != nil || obj.Comment != nil || obj.Policy != nil || obj.Device != nil || obj.Handle != nil {
			return cannot("base chain or chain with attributes %s", obj.Name)
		}
		switch o.verb {
		case opAdd:
			b.msg(unix.NFT_MSG_NEWCHAIN, netlink.Create, func(ae *netlink.AttributeEncoder) {
				ae.String(unix.NFTA_CHAIN_TABLE, b.table)
				ae.String(unix.NFTA_CHAIN_NAME, obj.Name)
			})
		case opFlush:
			b.msg(unix.NFT_MSG_DELRULE, 0, func(ae *netlink.AttributeEncoder) {
				ae.String(unix.NFTA_RULE_TABLE, b.table)
				ae.String(unix.NFTA_RULE_CHAIN, obj.Name)
			})
		case opDelete:
			b.msg(unix.NFT_MSG_DELCHAIN, 0, func(ae *netlink.AttributeEncoder) {
				ae.String(unix.NFTA_CHAIN_TABLE, b.table)
				ae.String(unix.NFTA_CHAIN_NAME, obj.Name)
			})
		}
		return nil
	case *knftables.Rule:
		if o.verb != opAdd || obj.Index != nil || obj.Handle != nil {
			return cannot("rule operation other than add")
		}
		return b.rule(obj, o.rule)
	case *knftables.Set:
		return b.setOrMap(o.verb, obj.Name, func() error { return b.affinitySet(obj) })
	case *knftables.Map:
		return b.setOrMap(o.verb, obj.Name, func() error { return b.endpointMap(obj) })
	case *knftables.Element:
		return b.elements(o.verb, []*knftables.Element{obj})
	}
	return cannot("%T operation %d", o.obj, o.verb)
}

// msg appends a message of type t (NFT_MSG_*) whose attributes attrs writes.
func (b *batch) msg(t int, flags netlink.HeaderFlags, attrs func(*netlink.AttributeEncoder)) {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	attrs(ae)
	data, err := ae.Encode()
	if err != nil {
		// Only an attribute longer than 64 KiB fails; nothing we write is.
		panic(fmt.Sprintf("encoding netlink attributes: %v", err))
	}
	b.msgs = append(b.msgs, netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | t), Flags: netlink.Request | flags},
		Data:   append([]byte{b.fam.nfproto(), unix.NFNETLINK_V0, 0, 0}, data...),
	})
}

func (f family) nfproto() byte {
	if f.model == ipv6.model {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

func (b *batch) delSet(name string) {
	b.msg(unix.NFT_MSG_DELSET, 0, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_TABLE, b.table)
		ae.String(unix.NFTA_SET_NAME, name)
	})
}

// affinitySet creates a set of the one shape written incrementally: an
// affinity set (source addresses, dynamic, with a timeout).
func (b *batch) affinitySet(s *knftables.Set) error {
	want := []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}
	if s.Type != b.fam.addrType || s.TypeOf != "" || s.Comment != nil || s.Size != nil || s.Policy != nil ||
		s.AutoMerge != nil || s.Timeout == nil || len(s.Flags) != 2 || s.Flags[0] != want[0] || s.Flags[1] != want[1] {
		return cannot("set %s of this shape", s.Name)
	}
	id := b.newID(s.Name)
	b.msg(unix.NFT_MSG_NEWSET, netlink.Create, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_TABLE, b.table)
		ae.String(unix.NFTA_SET_NAME, s.Name)
		ae.Uint32(unix.NFTA_SET_FLAGS, unix.NFT_SET_TIMEOUT|unix.NFT_SET_EVAL)
		ae.Uint32(unix.NFTA_SET_KEY_TYPE, b.fam.addrTypeID())
		ae.Uint32(unix.NFTA_SET_KEY_LEN, uint32(b.fam.addrLen()))
		ae.Uint32(unix.NFTA_SET_ID, id)
		ae.Uint64(unix.NFTA_SET_TIMEOUT, uint64(s.Timeout.Milliseconds()))
		ae.Bytes(unix.NFTA_SET_USERDATA, udataU32(nil, udataSetKeyByteorder, byteorderBig))
	})
	return nil
}

func (b *batch) newID(name string) uint32 {
	b.nextID++
	if name != "" {
		b.newIDs[name] = b.nextID
	}
	return b.nextID
}

func (f family) addrTypeID() uint32 {
	if f.model == ipv6.model {
		return typeIPv6Addr
	}
	return typeIPv4Addr
}

func (f family) addrLen() int {
	if f.model == ipv6.model {
		return 16
	}
	return 4
}

// udataU32 appends a TLV of libnftnl's user data holding a host-endian u32.
func udataU32(b []byte, typ byte, v uint32) []byte {
	b = append(b, typ, 4)
	return binary.NativeEndian.AppendUint32(b, v)
}

// udataString appends a TLV of libnftnl's user data holding a C string.
func udataString(b []byte, typ byte, s string) []byte {
	b = append(b, typ, byte(len(s)+1))
	b = append(b, s...)
	return append(b, 0)
}

// elements adds or deletes elements of one named set or map, in one
// message.
func (b *batch) elements(v verb, es []*knftables.Element) error {
	name, isMap := es[0].Set, false
	if es[0].Map != "" {
		name, isMap = es[0].Map, true
	}
	def := b.sets(name)
	if def == nil || def.isMap != isMap {
		return cannot("element of %s", name)
	}
	t, flags := unix.NFT_MSG_NEWSETELEM, netlink.Create
	switch v {
	case opAdd:
	case opDelete:
		t, flags = unix.NFT_MSG_DELSETELEM, 0
	default:
		return cannot("element operation %d", v)
	}
	writers := make([]func(*netlink.AttributeEncoder), 0, len(es))
	for _, e := range es {
		var w func(*netlink.AttributeEncoder)
		var err error
		if def.typeOf != "" {
			w, err = b.endpointElem(v, name, def, e)
		} else {
			w, err = b.element(v, name, def, e)
		}
		if err != nil {
			return err
		}
		writers = append(writers, w)
	}
	b.msg(t, flags, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, b.table)
		ae.String(unix.NFTA_SET_ELEM_LIST_SET, name)
		if id, ok := b.newIDs[name]; ok {
			ae.Uint32(unix.NFTA_SET_ELEM_LIST_SET_ID, id)
		}
		ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(ae *netlink.AttributeEncoder) error {
			for _, w := range writers {
				w(ae)
			}
			return nil
		})
	})
	return nil
}

// element checks one element of set def and returns what writes it in a
// list of elements.
func (b *batch) element(v verb, name string, def *set, e *knftables.Element) (func(*netlink.AttributeEncoder), error) {
	if e.Comment != nil && len(*e.Comment) > 250 {
		return nil, cannot("element comment of %d bytes", len(*e.Comment))
	}
	keyTypes, valType, _ := strings.Cut(def.typ, " : ")
	key, err := encodeKey(strings.Split(keyTypes, " . "), e.Key)
	if err != nil {
		return nil, cannot("element key %v of %s: %v", e.Key, name, err)
	}
	var verdict *expr.Verdict
	if v == opAdd && def.isMap {
		if valType != "verdict" || len(e.Value) != 1 {
			return nil, cannot("element value %v of %s", e.Value, name)
		}
		if verdict, err = parseVerdict(e.Value[0]); err != nil {
			return nil, cannot("element value %v of %s: %v", e.Value, name, err)
		}
	}
	return func(ae *netlink.AttributeEncoder) {
		ae.Nested(unix.NFTA_LIST_ELEM, func(ae *netlink.AttributeEncoder) error {
			encodeElem(ae, key, verdict, nil)
			if v == opAdd && e.Comment != nil {
				ae.Bytes(unix.NFTA_SET_ELEM_USERDATA, udataString(nil, udataElemComment, *e.Comment))
			}
			return nil
		})
	}, nil
}

// encodeElem writes one element's key and value (a verdict or data).
func encodeElem(ae *netlink.AttributeEncoder, key []byte, verdict *expr.Verdict, data []byte) {
	ae.Nested(unix.NFTA_SET_ELEM_KEY, func(ae *netlink.AttributeEncoder) error {
		ae.Bytes(unix.NFTA_DATA_VALUE, key)
		return nil
	})
	switch {
	case verdict != nil:
		ae.Nested(unix.NFTA_SET_ELEM_DATA, func(ae *netlink.AttributeEncoder) error {
			ae.Nested(unix.NFTA_DATA_VERDICT, func(ae *netlink.AttributeEncoder) error {
				ae.Uint32(unix.NFTA_VERDICT_CODE, uint32(int32(verdict.Kind)))
				if verdict.Chain != "" {
					ae.String(unix.NFTA_VERDICT_CHAIN, verdict.Chain)
				}
				return nil
			})
			return nil
		})
	case data != nil:
		ae.Nested(unix.NFTA_SET_ELEM_DATA, func(ae *netlink.AttributeEncoder) error {
			ae.Bytes(unix.NFTA_DATA_VALUE, data)
			return nil
		})
	}
}

// encodeKey encodes a key of the given types as nft does: the fields of a
// concatenation each take a multiple of 4 bytes.
func encodeKey(types, parts []string) ([]byte, error) {
	if len(types) != len(parts) {
		return nil, fmt.Errorf("%d parts for a key of %d", len(parts), len(types))
	}
	var out []byte
	for i, typ := range types {
		var field []byte
		switch typ {
		case "ipv4_addr", "ipv6_addr":
			a, err := netip.ParseAddr(parts[i])
			if err != nil || a.Zone() != "" || a.Is4() != (typ == "ipv4_addr") {
				return nil, fmt.Errorf("%q is not an %s", parts[i], typ)
			}
			field = a.AsSlice()
		case "inet_proto":
			p, ok := protoNumber(parts[i])
			if !ok {
				return nil, fmt.Errorf("protocol %q", parts[i])
			}
			field = []byte{p}
		case "inet_service":
			n, err := strconv.ParseUint(parts[i], 10, 16)
			if err != nil {
				return nil, fmt.Errorf("port %q", parts[i])
			}
			field = binary.BigEndian.AppendUint16(nil, uint16(n))
		default:
			return nil, fmt.Errorf("type %s", typ)
		}
		out = append(out, field...)
		if len(types) > 1 {
			for len(out)%4 != 0 {
				out = append(out, 0)
			}
		}
	}
	return out, nil
}

func protoNumber(s string) (byte, bool) {
	switch s {
	case "tcp":
		return unix.IPPROTO_TCP, true
	case "udp":
		return unix.IPPROTO_UDP, true
	case "sctp":
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}

// parseVerdict parses "goto CHAIN", "jump CHAIN", "drop", "accept", "return".
func parseVerdict(s string) (*expr.Verdict, error) {
	if target, ok := strings.CutPrefix(s, "goto "); ok && validName(target) {
		return &expr.Verdict{Kind: expr.VerdictGoto, Chain: target}, nil
	}
	if target, ok := strings.CutPrefix(s, "jump "); ok && validName(target) {
		return &expr.Verdict{Kind: expr.VerdictJump, Chain: target}, nil
	}
	switch s {
	case "drop":
		return &expr.Verdict{Kind: expr.VerdictDrop}, nil
	case "accept":
		return &expr.Verdict{Kind: expr.VerdictAccept}, nil
	case "return":
		return &expr.Verdict{Kind: expr.VerdictReturn}, nil
	}
	return nil, fmt.Errorf("verdict %q", s)
}

// validName: a chain or set name as we write them.
func validName(s string) bool {
	if s == "" || len(s) > knftables.NameLengthMax {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_./", c) >= 0) {
			return false
		}
	}
	return true
}

// send runs msgs as one batch: the kernel applies all of them or none.
func (w *nlTable) send(ctx context.Context, msgs []netlink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if w.conn == nil {
		c, err := w.dial()
		if err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		// Errors then say which attribute the kernel rejected.
		_ = c.SetOption(netlink.ExtendedAcknowledge, true)
		w.conn, w.forget = c, nfmonitor.OwnSocket(c.PID())
	}
	err := w.sendBatch(ctx, msgs)
	if err != nil {
		// The socket may hold replies we did not read: start afresh.
		w.close()
	}
	return err
}

func (w *nlTable) sendBatch(ctx context.Context, msgs []netlink.Message) error {
	seq := func() uint32 { w.seq++; return w.seq }
	batchMsg := func(t int) netlink.Message {
		return netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(t), Flags: netlink.Request, Sequence: seq()},
			Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES},
		}
	}
	all := make([]netlink.Message, 0, len(msgs)+2)
	all = append(all, batchMsg(unix.NFNL_MSG_BATCH_BEGIN))
	size := 0
	for _, m := range msgs {
		m.Header.Sequence = seq()
		all = append(all, m)
		size += 16 + len(m.Data)
	}
	// Only the last message asks for an acknowledgement: the kernel reports
	// errors (which abort the whole batch) before it, in order.
	all[len(all)-1].Header.Flags |= netlink.Acknowledge
	last := all[len(all)-1].Header.Sequence
	all = append(all, batchMsg(unix.NFNL_MSG_BATCH_END))

	// A batch is one datagram: make room for it, as nft does.
	if size > 128<<10 {
		if err := w.setSendBuffer(size + 64<<10); err != nil {
			return fmt.Errorf("netlink: growing the send buffer to %d bytes: %w", size, err)
		}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	// (Best effort: only test connections cannot have one.)
	_ = w.conn.SetDeadline(deadline)
	if _, err := w.conn.SendMessages(all); err != nil {
		return fmt.Errorf("netlink: sending %d messages: %w", len(msgs), err)
	}
	for {
		replies, err := w.conn.Receive()
		if err != nil {
			return fmt.Errorf("netlink transaction (%d messages): %w", len(msgs), err)
		}
		for _, r := range replies {
			if r.Header.Sequence == last {
				return nil
			}
		}
	}
}

func (w *nlTable) setSendBuffer(n int) error {
	rc, err := w.conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n)
	}); err != nil {
		return err
	}
	return serr
}

// close releases the socket.
func (w *nlTable) close() {
	if w.conn != nil {
		w.conn.Close()
		w.forget()
		w.conn, w.forget = nil, nil
	}
}

// netlinkFallbacksTotal counts the incremental transactions that went
// through nft because an operation was not translated (kpng's own metric:
// kube-proxy has no netlink path).
var netlinkFallbacksTotal = metrics.NewCounterVec(&metrics.CounterOpts{
	Namespace: "kpng", Subsystem: "nftables", Name: "netlink_fallbacks_total",
	Help:           "Incremental nftables transactions written by the nft command because the netlink path does not translate one of their operations",
	StabilityLevel: metrics.ALPHA,
}, []string{"ip_family"})

var registerOnce sync.Once

// registerMetrics registers the backend's own metrics (kube-proxy's are
// registered by proxyutil/metrics).
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(netlinkFallbacksTotal) })
}
