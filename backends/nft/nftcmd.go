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
// but for one thing: consecutive element commands on one set are merged
// into one ("add element ip kpng m { a, b, c }"). nft sends a netlink
// message per command, and the kernel finds a set by name by going through
// every set of the table; at 10,000 services the 100,000 elements of the
// endpoint maps, a command each, made a cold sync take 60 s, and 23 s
// merged (measured in a namespace with `nft -f` of both texts).
type nftCommand struct {
	knftables.Interface // NewTransaction
}

// Run implements knftables.Interface.
func (n nftCommand) Run(ctx context.Context, tx *knftables.Transaction) error {
	in, err := n.input(tx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Its transaction is ours, not a change behind our back.
	if err := nfmonitor.RunOwn(cmd, in); err != nil {
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

// input is what Run writes to nft -f for tx.
func (n nftCommand) input(tx *knftables.Transaction) (io.Reader, error) {
	text := tx.String()
	if _, msg, bad := strings.Cut(text, "# ERROR: "); bad {
		return nil, errors.New(strings.TrimSpace(msg))
	}
	return strings.NewReader(mergeElements(text)), nil
}

// maxErrorBytes bounds what an error keeps of nft's messages.
const maxErrorBytes = 4096

// maxElemsPerCommand bounds a merged command (nft splits it into netlink
// messages as they fill).
const maxElemsPerCommand = 1000

// mergeElements merges runs of "add element F T S { E }" lines on one set
// (likewise "delete element") into "add element F T S { E1, E2, ... }".
// Other lines, and the order of everything, stay as they are.
func mergeElements(text string) string {
	var out strings.Builder
	out.Grow(len(text))
	prefix, n := "", 0 // the open merged command, and its elements
	closeRun := func() {
		if prefix != "" {
			out.WriteString(" }\n")
			prefix, n = "", 0
		}
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		l := strings.TrimSuffix(line, "\n")
		head, body, ok := strings.Cut(l, " { ")
		isElem := ok && strings.HasSuffix(body, " }") && (strings.HasPrefix(head, "add element ") || strings.HasPrefix(head, "delete element "))
		if !isElem {
			closeRun()
			out.WriteString(line)
			continue
		}
		body = strings.TrimSuffix(body, " }")
		if head == prefix && n < maxElemsPerCommand {
			out.WriteString(", ")
		} else {
			closeRun()
			prefix = head
			out.WriteString(head + " { ")
		}
		out.WriteString(body)
		n++
	}
	closeRun()
	return out.String()
}
