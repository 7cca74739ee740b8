//go:build e2e

package ebpf

import (
	"testing"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// TestVerifierLoadsEveryProgram loads every socket program into this
// kernel: the verifier accepts them, or the test says which and why.
func TestVerifierLoadsEveryProgram(t *testing.T) {
	netnstest.RequireRoot(t)
	spec, err := loadSock()
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Programs) != len(hooks) {
		t.Errorf("bpf/sock.c has %d programs, hooks lists %d", len(spec.Programs), len(hooks))
	}
	start := time.Now()
	o, err := Load("")
	if err != nil {
		t.Fatalf("%+v", err) // the verifier's log, with %+v
	}
	defer o.Close()
	t.Logf("loaded %d programs and %d maps in %v", len(hooks), len(spec.Maps), time.Since(start).Round(time.Microsecond))
	for _, h := range hooks {
		p := h.prog(&o.objs.sockPrograms)
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, _ := info.VerifiedInstructions()
		t.Logf("%s: %s, %d verified instructions", h.name, p.Type(), insns)
	}
}
