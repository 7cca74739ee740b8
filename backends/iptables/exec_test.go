package iptables

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/kpng/kpng/backend"
)

// shRunner is an execRunner whose iptables-restore is a shell script, and
// whose iptables-save reads empty tables.
type shRunner struct{ *execRunner }

func newShRunner(script string) shRunner {
	return shRunner{&execRunner{restoreCmd: "iptables-restore", wrap: []string{"sh", "-c", script, "sh"}}}
}

func (shRunner) save(context.Context, io.Writer) error { return nil }

// TestExecRestoreStreamsFullInput: a full sync's input reaches
// iptables-restore whole, written as it reads; when it fails before
// reading it all, the restore returns (the writer is not left blocked) with
// the input's lines around the one it blames.
func TestExecRestoreStreamsFullInput(t *testing.T) {
	st := bigState(500, 10)
	f := newFakeTables()
	p := newProxier(false, testConfig(), f)
	mustSync(t, p, st, backend.Changes{Reset: true})
	want := f.restores[0]

	out := t.TempDir() + "/input"
	p.run = newShRunner("cat > " + out)
	res := mustSync(t, p, st, backend.Changes{Reset: true})
	if res.bytes != len(want) {
		t.Errorf("restore input of %d bytes, counted %d", len(want), res.bytes)
	}
	p.run = newShRunner("cmp -s - " + out)
	mustSync(t, p, st, backend.Changes{Reset: true})

	p.run = newShRunner("head -c 100 >/dev/null; echo 'iptables-restore: line 3 failed' >&2; exit 1")
	_, err := p.sync(context.Background(), st, backend.Changes{Reset: true})
	var re *restoreError
	if !errors.As(err, &re) {
		t.Fatalf("want a restore error, got %v", err)
	}
	lines := strings.Split(want, "\n")
	if !strings.Contains(re.lines, "     3 "+lines[2]+"\n") || !strings.Contains(re.lines, "     4 "+lines[3]+"\n") {
		t.Errorf("lines around the failure:\n%s\nwant lines 1 to 4 of:\n%s", re.lines, strings.Join(lines[:4], "\n"))
	}
	if !p.needFull {
		t.Error("a failed restore must make the next sync full")
	}
}
