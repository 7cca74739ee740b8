//go:build e2e

package ebpf

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/kpng/kpng/internal/netnstest"
)

// TestVerifierLoadsEveryProgram loads every program (socket and node-port) into this
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
	t.Logf("loaded %d socket and %d node-port programs with their maps in %v", len(hooks), len(tcHooks), time.Since(start).Round(time.Microsecond))
	for _, h := range hooks {
		logVerified(t, h.name, h.prog(&o.objs.sockPrograms))
	}
	npSpec, err := loadNodeport()
	if err != nil {
		t.Fatal(err)
	}
	if len(npSpec.Programs) != len(tcHooks) {
		t.Errorf("bpf/nodeport.c has %d programs, tcHooks lists %d", len(npSpec.Programs), len(tcHooks))
	}
	for _, h := range tcHooks {
		logVerified(t, "nodeport_"+h.dir, h.prog(&o.np.nodeportPrograms))
	}
}

func logVerified(t *testing.T, name string, p *ebpf.Program) {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	insns, _ := info.VerifiedInstructions()
	t.Logf("%s: %s, %d verified instructions", name, p.Type(), insns)
}
