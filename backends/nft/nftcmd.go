package nft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/proxyutil/nfmonitor"
)

// nftCommand runs transactions with the nft command, as knftables does,
// but for two things. Consecutive element commands on one set are merged
// into one ("add element ip kpng m { a, b, c }"): nft sends a netlink
// message per command, and the kernel finds a set by name by going through
// every set of the table; at 10,000 services the 100,000 elements of the
// endpoint maps, a command each, made a cold sync take 60 s, and 23 s
// merged (measured in a namespace with `nft -f` of both texts). And a
// plan's operations are rendered as nft reads them (see opsReader), not
// into one text first: a cold sync's is 8 MB, and building it whole was
// some 80 MB of garbage and 15 MB more at the sync's peak.
type nftCommand struct {
	knftables.Interface // NewTransaction
}

// Run implements knftables.Interface, for a transaction made elsewhere.
func (n nftCommand) Run(ctx context.Context, tx *knftables.Transaction) error {
	text := tx.String()
	if _, msg, bad := strings.Cut(text, "# ERROR: "); bad {
		return errors.New(strings.TrimSpace(msg))
	}
	return n.exec(ctx, strings.NewReader(mergeElements(text)))
}

// runOps runs a plan's operations as one nft -f (see opsRunner).
func (n nftCommand) runOps(ctx context.Context, ops []op) error {
	return n.exec(ctx, n.input(ops))
}

// input is what runOps writes to nft -f for ops.
func (n nftCommand) input(ops []op) *opsReader {
	return &opsReader{nft: n.Interface, ops: ops}
}

// exec runs nft -f with its input from in. When in is an opsReader whose
// rendering fails (its err), nft is killed before it reads the end of its
// input: nft commits whatever commands it read, so it must not see the
// input end.
func (n nftCommand) exec(ctx context.Context, in io.Reader) error {
	r, _ := in.(*opsReader)
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if r != nil {
		r.abort = func() {
			if cmd.Process != nil {
				_ = cmd.Process.Kill()
			}
		}
	}
	// Its transaction is ours, not a change behind our back.
	err := nfmonitor.RunOwn(cmd, in)
	if r != nil && r.err != nil {
		return r.err
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > maxErrorBytes {
			// nft repeats each failing command with its error: a refused
			// transaction of thousands of commands says it thousands of
			// times.
			msg = msg[:maxErrorBytes] + fmt.Sprintf(" [... %d more bytes]", len(msg)-maxErrorBytes)
		}
		return fmt.Errorf("nft -f: %w: %s", err, msg)
	}
	return nil
}

// maxErrorBytes bounds what an error keeps of nft's messages.
const maxErrorBytes = 4096

// renderChunk is how many operations opsReader renders at a time.
var renderChunk = 512

// opsReader is nft's input for ops: the text of knftables' transaction of
// them, element commands merged (see merger), rendered renderChunk
// operations at a time as it is read. knftables renders a transaction only
// whole, so each chunk is a transaction of its own, written the same way.
type opsReader struct {
	nft  knftables.Interface
	ops  []op // not yet rendered
	m    merger
	buf  bytes.Buffer // rendered, not yet read
	done bool         // the last chunk is rendered
	// err is why rendering failed; abort, when set, is called first (see
	// nftCommand.exec).
	err   error
	abort func()
}

func (r *opsReader) Read(p []byte) (int, error) {
	for r.buf.Len() == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		r.render()
	}
	return r.buf.Read(p)
}

// render renders the next chunk of operations into buf.
func (r *opsReader) render() {
	r.buf.Reset() // read whole: keep its array
	n := min(len(r.ops), renderChunk)
	text := transaction(r.nft, r.ops[:n]).String()
	r.ops = r.ops[n:]
	if _, msg, bad := strings.Cut(text, "# ERROR: "); bad {
		r.err = errors.New(strings.TrimSpace(msg))
		if r.abort != nil {
			r.abort()
		}
		return
	}
	r.m.write(&r.buf, text)
	if len(r.ops) == 0 {
		r.m.close(&r.buf)
		r.done = true
	}
}

// maxElemsPerCommand bounds a merged command (nft splits it into netlink
// messages as they fill).
const maxElemsPerCommand = 1000

// mergeElements merges runs of "add element F T S { E }" lines on one set
// (likewise "delete element") into "add element F T S { E1, E2, ... }".
// A run of additions that follows the "add set" or "add map" of its set
// goes into that declaration instead ("add map F T S { ... ; elements =
// { E1, E2, ... } ; }"): same ruleset, and at 10,000 services of 10
// endpoints, loaded with nft -f into an empty namespace, 4.8 s of the
// kernel's time against 6.2 s with the elements in commands of their own
// (three runs each, alternated; docs/performance.md). Other lines, and
// the order of everything, stay as they are.
func mergeElements(text string) string {
	var out bytes.Buffer
	out.Grow(len(text))
	var m merger
	m.write(&out, text)
	m.close(&out)
	return out.String()
}

// merger is mergeElements for a text written in pieces of whole lines:
// a run may go on from one piece to the next.
type merger struct {
	prefix string // the open merged command ("" none)
	n      int    // its elements
	// inDecl: the open command is a set's declaration, its elements
	// written into it.
	inDecl bool
	// decl is an "add set" or "add map" line held back, without its
	// newline, for the elements that may follow it; declElem is the head
	// of their command ("add element F T S").
	decl, declElem string
}

// write writes text, whole lines, to out, merging element commands.
func (m *merger) write(out *bytes.Buffer, text string) {
	for len(text) > 0 {
		line, rest, nl := strings.Cut(text, "\n")
		text = rest
		head, body, ok := strings.Cut(line, " { ")
		isElem := ok && strings.HasSuffix(body, " }") && (strings.HasPrefix(head, "add element ") || strings.HasPrefix(head, "delete element "))
		if !isElem {
			m.close(out)
			if elemHead, ok := declaration(head, body); ok && nl {
				m.decl, m.declElem = strings.Clone(line), elemHead
				continue
			}
			out.WriteString(line)
			if nl {
				out.WriteByte('\n')
			}
			continue
		}
		body = strings.TrimSuffix(body, " }")
		switch {
		case head == m.prefix && m.n < maxElemsPerCommand:
			out.WriteString(", ")
		case m.decl != "" && head == m.declElem:
			// Into the declaration: "add map F T S { ... ;" then
			// " elements = { E".
			out.WriteString(strings.TrimSuffix(m.decl, "}"))
			out.WriteString("elements = { ")
			m.prefix, m.inDecl, m.decl = m.declElem, true, ""
		default:
			m.close(out)
			m.prefix = strings.Clone(head) // text is garbage once written
			out.WriteString(head)
			out.WriteString(" { ")
		}
		out.WriteString(body)
		m.n++
	}
}

// declaration reports whether a line cut at its first " { " into head
// and body declares a set or map whose elements can be written into it,
// and the head of those elements' command.
func declaration(head, body string) (string, bool) {
	kind, name, ok := strings.Cut(head, " ")
	if !ok || !strings.HasSuffix(body, " ; }") {
		return "", false
	}
	switch {
	case kind == "add" && strings.HasPrefix(name, "set "):
		return "add element " + strings.TrimPrefix(name, "set "), true
	case kind == "add" && strings.HasPrefix(name, "map "):
		return "add element " + strings.TrimPrefix(name, "map "), true
	}
	return "", false
}

// close ends the open merged command, if any, and writes a declaration
// held back.
func (m *merger) close(out *bytes.Buffer) {
	switch {
	case m.prefix != "" && m.inDecl:
		out.WriteString(" } ; }\n")
	case m.prefix != "":
		out.WriteString(" }\n")
	case m.decl != "":
		out.WriteString(m.decl)
		out.WriteByte('\n')
	}
	m.prefix, m.n, m.inDecl, m.decl = "", 0, false, ""
}
