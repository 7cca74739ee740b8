package apiserver

import (
	"path/filepath"
	"testing"
)

// A retry appends to the same log; only the run's own output may say that
// it lost its port, or every failure after the first lost race would be
// retried as another one.
func TestAddrInUseReadsOnlyItsOwnRun(t *testing.T) {
	log := filepath.Join(t.TempDir(), "server.log")
	run := func(script string) *process {
		t.Helper()
		p, err := startProcess("sh", log, "/bin/sh", "-c", script)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.stop(0) })
		<-p.done
		return p
	}
	lost := run("echo 'listen tcp 127.0.0.1:4242: bind: address already in use' >&2; exit 1")
	if !lost.addrInUse() {
		t.Fatal("a run that logged 'address already in use' is not seen as having lost its port")
	}
	other := run("echo 'some other failure' >&2; exit 1")
	if other.addrInUse() {
		t.Error("a later run that failed otherwise is seen as having lost its port (an earlier run's line was read)")
	}
}
