package netlab

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// A probe whose handshake lost a packet is a failed probe even though the
// kernel's retransmission got it answered: a SYN dropped once (the client
// sends it again) and a handshake ACK dropped once (the server sends its
// SYN-ACK again, and says so in its answer). Without drops a probe is OK
// with no retransmission, and a UDP datagram dropped is never answered.
func TestProbeCountsHandshakeDrops(t *testing.T) {
	l := New(t, DefaultSpec())
	n1 := l.Node("node-1")
	if err := n1.Serve(9191); err != nil {
		t.Fatal(err)
	}
	// The drops are in node-1's input hook, each rule counting what it
	// dropped: the test lifts a drop once it has dropped one packet.
	rules := `
table inet probe-drops {
	counter dropsyn { }
	counter dropack { }
	counter dropudp { }
	chain dropsyn { tcp flags & (syn | ack) == syn counter name dropsyn drop; }
	chain dropack { tcp flags & (syn | ack | fin | rst) == ack counter name dropack drop; }
	chain dropudp { counter name dropudp drop; }
	chain input { type filter hook input priority 0; }
}
`
	if _, err := n1.NS.RunInput(rules, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []int{4, 6} {
		dst := netip.AddrPortFrom(n1.Addr(fam), 9191)
		t.Run(fmt.Sprintf("IPv%d", fam), func(t *testing.T) {
			if r := l.External.Probe(TCP, dst); r.Outcome != OK || r.Retransmits != 0 {
				t.Fatalf("no drop: got %v, %d retransmits; want ok, none", r, r.Retransmits)
			}
			for _, drop := range []string{"syn", "ack"} {
				t.Run(drop, func(t *testing.T) {
					r := dropOnce(t, n1, "drop"+drop, 9191, func() Result { return l.External.Probe(TCP, dst) })
					if r.Outcome != TimedOut || r.Retransmits == 0 {
						t.Errorf("%s dropped once: got %v, %d retransmits; want timed out, 1 or more", drop, r, r.Retransmits)
					}
					// Dial, as tests that expect an answer use it, reports
					// the same count beside an OK.
					r = dropOnce(t, n1, "drop"+drop, 9191, func() Result { return l.External.Dial(TCP, dst, ProbePatience) })
					if r.Outcome != OK || r.Retransmits == 0 {
						t.Errorf("%s dropped once, Dial: got %v, %d retransmits; want ok, 1 or more", drop, r, r.Retransmits)
					}
				})
			}
			if fam == 6 {
				return // a datagram's fate does not depend on its family
			}
			t.Run("udp", func(t *testing.T) {
				r := dropOnce(t, n1, "dropudp", 9191, func() Result { return l.External.Probe(UDP, dst) })
				if r.Outcome != TimedOut {
					t.Errorf("datagram dropped: got %v, want timed out", r)
				}
			})
		})
	}
}

var counterPackets = regexp.MustCompile(`packets (\d+)`)

// dropOnce runs probe while node n drops packets of kind (a chain and a
// counter of table probe-drops) to port, and lifts the drop as soon as it
// has dropped one packet; it returns probe's result.
func dropOnce(t *testing.T, n *Node, kind string, port int, probe func() Result) Result {
	t.Helper()
	run := func(cmd string) string {
		t.Helper()
		out, err := n.NS.RunInput(cmd+"\n", "nft", "-f", "-")
		if err != nil {
			t.Fatalf("nft %q: %v: %s", cmd, err, out)
		}
		return out
	}
	run(fmt.Sprintf("reset counter inet probe-drops %s", kind))
	run(fmt.Sprintf("add rule inet probe-drops input th dport %d jump %s", port, kind))
	done := make(chan Result, 1)
	go func() { done <- probe() }()
	// The counter is the event: the drop is lifted once it counted one.
	deadline := time.Now().Add(ProbePatience)
	for {
		out, err := n.NS.Run("nft", "list", "counter", "inet", "probe-drops", kind)
		if err != nil {
			t.Fatalf("nft list counter %s: %v: %s", kind, err, out)
		}
		m := counterPackets.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no packet count in %q", out)
		}
		if c, _ := strconv.Atoi(m[1]); c > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing dropped by %s within %v", kind, ProbePatience)
		}
		time.Sleep(10 * time.Millisecond) // pacing the polls of the counter
	}
	run("flush chain inet probe-drops input")
	return <-done
}
