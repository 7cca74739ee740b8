//go:build integration

package apiserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A kube-apiserver that cannot be executed (here a file that is not a
// program) fails the test with the reason, after etcd started, and leaves
// no process behind.
func TestStartFailsWhenAPIServerCannotRun(t *testing.T) {
	notAProgram := filepath.Join(t.TempDir(), "kube-apiserver")
	if err := os.WriteFile(notAProgram, []byte("not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvKubeAPIServer, notAProgram)
	var fatal string
	t.Run("start", func(t *testing.T) {
		r := &fatalRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Start(r)
		}()
		<-done
		fatal = r.fatal
	})
	if !strings.Contains(fatal, "exec format error") {
		t.Errorf("Start failed with %q, want the reason kube-apiserver could not run", fatal)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left behind: %v", kids)
	}
}

// children returns the pids of the test process's children.
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		out = append(out, strings.Fields(string(data))...)
	}
	return out
}
