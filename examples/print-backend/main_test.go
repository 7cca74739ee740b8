package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/server"
	"github.com/kpng/kpng/source/file"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPrintsTheViewFromAServer runs the example against a real kpng server
// serving the repository's example cluster, over a unix socket.
func TestPrintsTheViewFromAServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := cluster.NewStore()
	src := &file.Source{Path: "../cluster.yaml"}
	if err := src.Run(ctx, store); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "kpng.sock")
	lis, _, err := server.Listen("unix://"+sock, server.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- server.New(store, server.Options{}).Serve(ctx, lis) }()

	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--api", "unix://" + sock, "--node-name", "node-1"}, &out) }()

	// The example cluster's dual-stack "web" service, as node-1 sees it.
	want := []string{
		"# revision 1 (reset=true",
		"node node-1 zone=\"zone-a\"",
		"set default/web/v4 tcp 10.96.0.10:80 ->",
		"set default/web/v6 tcp [fd00:10:96::10]:80 -> [fd00:10:244:1::5]:8080 [fd00:10:244:2::7]:8080",
	}
	deadline := time.Now().Add(time.Minute) // a hang guard, not a speed check
	for !containsAll(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output never held %q:\n%s", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestExampleIsSmall(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(src, []byte("\n")); n >= 150 {
		t.Errorf("main.go has %d lines; the example promises under 150", n)
	}
}
