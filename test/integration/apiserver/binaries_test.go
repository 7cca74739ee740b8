package apiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does, without failing the test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Missing binaries must fail the test with the way to install them: a skip
// would let CI pass without running the integration tests. This is a unit
// test: it runs on a fresh clone, where neither binary is installed, so the
// other binary's variable names an executable that Start never reaches.
func TestStartFailsWhenBinaryIsMissing(t *testing.T) {
	other := map[string]string{EnvKubeAPIServer: EnvEtcd, EnvEtcd: EnvKubeAPIServer}
	for _, env := range []string{EnvKubeAPIServer, EnvEtcd} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, filepath.Join(t.TempDir(), "missing"))
			t.Setenv(other[env], standIn(t))
			r := &fatalRecorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				s := Start(r)
				s.Stop()
			}()
			<-done
			if r.fatal == "" {
				t.Fatalf("Start with %s pointing to a missing file did not fail the test", env)
			}
			if !strings.Contains(r.fatal, env) {
				t.Errorf("failure %q does not name %s", r.fatal, env)
			}
		})
	}
}

// standIn returns an executable file that findBinaries accepts and that
// must never run.
func standIn(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stand-in")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'a stand-in binary ran' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFindBinariesHintsAtInstallScript(t *testing.T) {
	t.Setenv(EnvKubeAPIServer, "")
	t.Chdir(t.TempDir()) // outside the repository: no .cache/bin to find
	_, err := findBinaries()
	if err == nil || !strings.Contains(err.Error(), "hack/install-test-deps.sh") {
		t.Fatalf("findBinaries() outside the repository = %v, want an error naming hack/install-test-deps.sh", err)
	}
}

func TestRepoRootFindsKpngModule(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "integration", "apiserver", "doc.go")); err != nil {
		t.Errorf("repoRoot() = %s, which does not hold this package: %v", root, err)
	}

	// A go.mod of another module (hack/tools, say) is passed over.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if got, err := repoRoot(); err == nil {
		t.Errorf("repoRoot() in a directory of another module = %s, want an error", got)
	}
}
