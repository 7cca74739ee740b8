package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func execute(ctx context.Context, t *testing.T, args ...string) error {
	t.Helper()
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	return root.ExecuteContext(ctx)
}

// The README's first command: the example cluster, seen from node-1.
func TestFileToFileGolden(t *testing.T) {
	out := filepath.Join(t.TempDir(), "view.yaml")
	if err := execute(context.Background(), t, "file", "--input", "../../examples/cluster.yaml",
		"to-file", "--node-name", "node-1", "--output", out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "cluster-node-1.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("view differs from %s (run go test -update and review the diff):\n%s", golden, got)
	}
}

// --follow writes a new JSON line when the watched file changes.
func TestFollowSeesFileChanges(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "cluster.yaml")
	example, err := os.ReadFile("../../examples/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(input, example, 0o644); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		defer w.Close()
		done <- execute(ctx, t, "file", "--input", input, "to-file", "--node-name", "node-1",
			"--output", "/dev/fd/"+strconv.Itoa(int(w.Fd())), "--format", "json", "--follow")
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kpng: %v", err)
		}
	}()

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() (view struct {
		Revision string
		Services []struct{ Service struct{ Name string } }
	}) {
		t.Helper()
		select {
		case l := <-lines:
			if err := json.Unmarshal([]byte(l), &view); err != nil {
				t.Fatalf("not a JSON line: %v: %q", err, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no view within 10s")
		}
		return view
	}
	names := func(v struct {
		Revision string
		Services []struct{ Service struct{ Name string } }
	}) string {
		var n []string
		for _, s := range v.Services {
			n = append(n, s.Service.Name)
		}
		return strings.Join(n, ",")
	}

	first := next()
	if !strings.Contains(names(first), "not-yet-deployed") {
		t.Fatalf("first view lacks not-yet-deployed: %s", names(first))
	}
	// Remove a Service from the file (atomically, as editors and
	// ConfigMap updates do).
	edited := strings.Replace(string(example), "name: not-yet-deployed", "name: renamed", 1)
	tmp := input + ".tmp"
	if err := os.WriteFile(tmp, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, input); err != nil {
		t.Fatal(err)
	}
	second := next()
	if strings.Contains(names(second), "not-yet-deployed") || !strings.Contains(names(second), "renamed") || second.Revision == first.Revision {
		t.Fatalf("after the edit: revision %s -> %s, services %s", first.Revision, second.Revision, names(second))
	}
}

// Errors name what is wrong and never start a half pipeline.
func TestCommandErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"file", "to-file", "--node-name", "n"}, "--input is required"},
		{[]string{"file", "--input", "/does/not/exist.yaml", "to-file", "--node-name", "n"}, "exist.yaml"},
		{[]string{"file", "--input", "../../examples/cluster.yaml", "to-file", "--node-name", "n", "--format", "xml"}, `"xml"`},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := execute(ctx, t, c.args...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kpng %s: error %v, want one containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
