package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kpng/kpng/proxyutil/nfmonitor"
)

// runner applies restore input to one family's tables and reads them back.
type runner interface {
	// restore runs iptables-restore --noflush with the input in.
	restore(ctx context.Context, in input) error
	// save writes iptables-save's output (all tables) to w, as it is
	// read: at scale it is tens of megabytes, which the caller parses
	// without keeping.
	save(ctx context.Context, w io.Writer) error
}

// execRunner runs the iptables binaries of one family and variant.
type execRunner struct {
	restoreCmd, saveCmd string
	// wait is the xtables lock wait in whole seconds (-w N): never forever.
	wait int
	// wrap prefixes every command (tests: ip netns exec NAME); env adds to
	// its environment.
	wrap []string
	env  []string
}

func (r *execRunner) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, r.wrap...), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(r.env) > 0 {
		cmd.Env = append(os.Environ(), r.env...)
	}
	return cmd
}

// restoreError is a failed iptables-restore, with the lines around the one
// it blamed.
type restoreError struct {
	err    error
	output string
	lines  string
}

func (e *restoreError) Error() string {
	s := fmt.Sprintf("iptables-restore: %v: %s", e.err, e.output)
	if e.lines != "" {
		s += "; input near the failure:\n" + e.lines
	}
	return s
}

func (r *execRunner) restore(ctx context.Context, in input) error {
	// -W is the lock retry interval in microseconds (legacy only; the nft
	// variant takes no lock and ignores both).
	cmd := r.command(ctx, r.restoreCmd, "-w", strconv.Itoa(r.wait), "-W", "100000", "--noflush")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its transaction is ours, not a change behind our back.
	// The input is written as the command reads it.
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		_, err := in.WriteTo(pw)
		pw.CloseWithError(err)
		written <- err
	}()
	err := nfmonitor.RunOwn(cmd, pr)
	pr.CloseWithError(errors.New("iptables-restore stopped reading")) // a writer still blocked returns
	if werr := <-written; err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		out := out.Bytes()
		// Quote the input's lines around the failure: it is written again,
		// in memory this time.
		var data bytes.Buffer
		in.WriteTo(&data)
		return &restoreError{err: err, output: strings.TrimSpace(string(out)), lines: failedLines(data.Bytes(), out)}
	}
	return nil
}

func (r *execRunner) save(ctx context.Context, w io.Writer) error {
	cmd := r.command(ctx, r.saveCmd)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", r.saveCmd, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// failedLines returns the input lines around the one iptables-restore names
// in "line N failed", for the error message.
func failedLines(data, out []byte) string {
	s := string(out)
	i := strings.Index(s, "line ")
	if i < 0 {
		return ""
	}
	rest := s[i+5:]
	j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if j <= 0 {
		return ""
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil {
		return ""
	}
	lines := strings.Split(string(data), "\n")
	var b strings.Builder
	for k := max(n-3, 1); k <= min(n+1, len(lines)); k++ {
		fmt.Fprintf(&b, "%6d %s\n", k, lines[k-1])
	}
	return b.String()
}

// dryRunner prints restore input instead of running it, and reads empty
// tables.
type dryRunner struct {
	family string
	mu     *sync.Mutex
	w      io.Writer
}

func (d dryRunner) restore(_ context.Context, in input) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := fmt.Fprintf(d.w, "# %s iptables-restore --noflush input\n", d.family); err != nil {
		return err
	}
	_, err := in.WriteTo(d.w)
	return err
}

func (d dryRunner) save(context.Context, io.Writer) error { return nil }

// variant is an iptables flavour: the binaries of both families.
type variant struct {
	name                             string // "nft" or "legacy"
	restore4, save4, restore6, save6 string
}

var variants = map[string]variant{
	"nft":    {"nft", "iptables-nft-restore", "iptables-nft-save", "ip6tables-nft-restore", "ip6tables-nft-save"},
	"legacy": {"legacy", "iptables-legacy-restore", "iptables-legacy-save", "ip6tables-legacy-restore", "ip6tables-legacy-save"},
}

// runnerFor returns the runner of a family.
func (v variant) runnerFor(ipv6 bool, wait time.Duration) *execRunner {
	r := &execRunner{restoreCmd: v.restore4, saveCmd: v.save4, wait: max(int(wait/time.Second), 1)}
	if ipv6 {
		r.restoreCmd, r.saveCmd = v.restore6, v.save6
	}
	return r
}
