//go:build integration

package kube

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpng/kpng/test/integration/apiserver"
)

// buildKpng builds the kpng binary into a temporary directory.
func buildKpng(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kpng")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/kpng/kpng/cmd/kpng").CombinedOutput()
	if err != nil {
		t.Fatalf("building kpng: %v\n%s", err, out)
	}
	return bin
}

// syncBuffer is a bytes.Buffer safe for a process to write and a test to
// read at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// jsonView is what the tests read of a `to-file --format json` line.
type jsonView struct {
	Revision string
	Services []struct {
		Service   struct{ Namespace, Name, Family string }
		Endpoints []struct{ IP string }
	}
}

func (v jsonView) endpoints(name string) []string {
	var out []string
	for _, s := range v.Services {
		if s.Service.Name == name {
			for _, e := range s.Endpoints {
				out = append(out, e.IP)
			}
		}
	}
	return out
}

func (v jsonView) has(name string) bool {
	for _, s := range v.Services {
		if s.Service.Name == name {
			return true
		}
	}
	return false
}

// The README's command, the real binary: `kpng kube --kubeconfig F to-file
// --node-name N --output -`, with the identity and permissions of
// deploy/rbac.yaml, prints the live view, a JSON line per revision with
// --follow, survives an API server restart with one line of log for it
// (at the default level: the test runs it at -v=4 to count the retries),
// and stops cleanly on SIGTERM.
func TestKpngKubeToFileFollows(t *testing.T) {
	api := apiserver.Start(t)
	bin := buildKpng(t)
	o := objects{t, api.Client}
	o.createNode(newNode("node-1", "zone-a", "192.168.0.1"))

	cmd := exec.Command(bin, "-v=4", "kube", "--kubeconfig", kpngKubeconfig(api),
		"to-file", "--node-name", "node-1", "--output", "-", "--format", "json", "--follow")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("kpng's standard error:\n%s", stderr.String())
		}
	})

	views := make(chan jsonView)
	go func() {
		defer close(views)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var v jsonView
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Errorf("not a JSON view: %v: %q", err, sc.Text())
				return
			}
			views <- v
		}
	}()
	waitView := func(what string, ok func(jsonView) bool) jsonView {
		t.Helper()
		deadline := time.After(waitTimeout)
		for {
			select {
			case v, open := <-views:
				if !open {
					t.Fatalf("%s: kpng's output ended", what)
				}
				if ok(v) {
					return v
				}
			case <-deadline:
				t.Fatalf("%s: no such view after %v", what, waitTimeout)
			}
		}
	}

	waitView("the first view", func(v jsonView) bool { return v.has("kubernetes") })
	o.createService(newService("late", false, nil))
	o.createSlice(newSlice("late", "late-1", discoveryv1.AddressTypeIPv4, newEndpoint("10.1.0.1", "node-2", "zone-a", ready)))
	waitView("a Service created while kpng runs", func(v jsonView) bool {
		return strings.Join(v.endpoints("late"), ",") == "10.1.0.1"
	})

	api.StopAPIServer()
	waitLog := func(what string, times int) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for strings.Count(stderr.String(), what) < times {
			if time.Now().After(deadline) {
				t.Fatalf("kpng did not log %q %d times", what, times)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLog("Lost contact with the API server", 1)
	// Enough retries (logged at -v=4) that a line per retry at the
	// default level would show.
	waitLog("API server still unreachable", 6)
	api.RestartAPIServer()
	waitLog("Back in contact with the API server", 1)
	o.createService(newService("after-outage", false, nil))
	waitView("a Service created after the outage", func(v jsonView) bool { return v.has("after-outage") && v.has("late") })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("kpng exited with %v after SIGTERM", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("kpng did not exit after SIGTERM")
	}

	// klog's text format: the first letter is the severity.
	var problems []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "E") || strings.HasPrefix(l, "W") || strings.HasPrefix(l, "F") {
			problems = append(problems, l)
		}
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "Lost contact with the API server") {
		t.Errorf("kpng logged %d errors or warnings, want only the outage's:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	if n := strings.Count(stderr.String(), "Back in contact with the API server"); n != 1 {
		t.Errorf("kpng logged the end of the outage %d times, want once", n)
	}
}
