package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// runTB lets a program use test/integration/apiserver, whose Start takes a
// testing.TB: it implements the methods that package calls, runs the
// cleanups when told to, and turns Fatal into a panic of fatalError that
// the caller recovers. The embedded interface is nil: a method not
// implemented here would panic, which the apiserver package never does.
type runTB struct {
	testing.TB
	dir string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

type fatalError struct{ msg string }

func (e fatalError) Error() string { return e.msg }

func newRunTB(dir string) *runTB { return &runTB{dir: dir} }

func (t *runTB) Helper()      {}
func (t *runTB) Name() string { return "kpng-bench" }

func (t *runTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *runTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "tmp")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	return d
}

func (t *runTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *runTB) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *runTB) Log(args ...any)                 { logf("%s", fmt.Sprint(args...)) }
func (t *runTB) Logf(format string, args ...any) { logf(format, args...) }
func (t *runTB) Error(args ...any)               { t.fail(); t.Log(args...) }
func (t *runTB) Errorf(format string, args ...any) {
	t.fail()
	t.Logf(format, args...)
}
func (t *runTB) Fatal(args ...any) { t.fail(); panic(fatalError{fmt.Sprint(args...)}) }
func (t *runTB) Fatalf(format string, args ...any) {
	t.fail()
	panic(fatalError{fmt.Sprintf(format, args...)})
}

// runCleanups runs the cleanups, last registered first.
func (t *runTB) runCleanups() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		f()
	}
}
