package tofile

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/source/file"
)

// exampleState is node-1's view of the project's example cluster.
func exampleState(t *testing.T) *localv1.NodeState {
	t.Helper()
	store := loadStore(t, "../../examples/cluster.yaml")
	view := brain.NewView(brain.Options{NodeName: "node-1"})
	var st *localv1.NodeState
	store.View(func(r cluster.Reader) {
		view.Update(r)
		st = view.State()
	})
	if len(st.Services) == 0 {
		t.Fatal("the example cluster gives node-1 no services")
	}
	return st
}

func loadStore(t *testing.T, path string) *cluster.Store {
	t.Helper()
	store := cluster.NewStore()
	src := file.Source{Path: path}
	if err := src.Load(klog.Background(), store); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()
	return store
}

func TestMarshalJSONRoundTrips(t *testing.T) {
	want := exampleState(t)
	for _, indent := range []bool{true, false} {
		doc, err := Marshal(want, "json", indent)
		if err != nil {
			t.Fatal(err)
		}
		if !indent && strings.Count(string(doc), "\n") != 1 {
			t.Errorf("compact JSON is not one line:\n%s", doc)
		}
		got := &localv1.NodeState{}
		if err := protojson.Unmarshal(doc, got); err != nil {
			t.Fatalf("indent=%v: reading back: %v", indent, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("indent=%v: JSON does not round-trip", indent)
		}
	}
}

func TestMarshalYAMLRoundTrips(t *testing.T) {
	want := exampleState(t)
	doc, err := Marshal(want, "yaml", true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "{") {
		t.Errorf("YAML has flow-style mappings:\n%s", doc)
	}
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := &localv1.NodeState{}
	if err := protojson.Unmarshal(js, got); err != nil {
		// A string that looks like a number (the revision is a uint64,
		// which protojson writes as a string) must stay quoted in YAML.
		t.Fatalf("reading back: %v\n%s", err, doc)
	}
	if !proto.Equal(got, want) {
		t.Error("YAML does not round-trip")
	}
}

func TestRunRejectsBadFormat(t *testing.T) {
	s := &Sink{Output: "-", Format: "xml"}
	err := s.Run(context.Background(), cluster.NewStore())
	if err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Fatalf("got %v, want an error naming the format", err)
	}
}

func TestRunReportsUnwritableOutput(t *testing.T) {
	s := &Sink{Output: filepath.Join(t.TempDir(), "missing", "out.yaml"), Format: "yaml"}
	err := s.Run(context.Background(), cluster.NewStore())
	if err == nil || !strings.Contains(err.Error(), "opening output") {
		t.Fatalf("got %v, want an opening error", err)
	}
}

func TestRunWithoutStateFailsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &Sink{Output: filepath.Join(t.TempDir(), "out"), Format: "json"}
	if err := s.Run(ctx, cluster.NewStore()); err == nil {
		t.Fatal("a sink that never saw a complete state returned no error")
	}
}

func TestRunOnceWritesTheView(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.json")
	store := loadStore(t, "../../examples/cluster.yaml")
	s := &Sink{Options: brain.Options{NodeName: "node-1"}, Output: out, Format: "json"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Run(ctx, store); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := &localv1.NodeState{}
	if err := protojson.Unmarshal(data, got); err != nil {
		t.Fatal(err)
	}
	if want := exampleState(t); !proto.Equal(got, want) {
		t.Error("the written view differs from the brain's")
	}
}

// TestFollowWritesEachRevision changes the file source's input twice and
// expects one JSON line per view revision, ending with the last content.
func TestFollowWritesEachRevision(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "cluster.yaml"), filepath.Join(dir, "out.jsonl")
	example, err := os.ReadFile("../../examples/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, example, 0o644); err != nil {
		t.Fatal(err)
	}
	store := cluster.NewStore()
	src := file.Source{Path: in}
	if err := src.Load(klog.Background(), store); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &Sink{Options: brain.Options{NodeName: "node-1"}, Output: out, Format: "json", Follow: true}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, store) }()

	lines := func() []*localv1.NodeState {
		f, err := os.Open(out)
		if err != nil {
			return nil
		}
		defer f.Close()
		var states []*localv1.NodeState
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			st := &localv1.NodeState{}
			if err := protojson.Unmarshal(sc.Bytes(), st); err != nil {
				return states // a line still being written
			}
			states = append(states, st)
		}
		return states
	}
	waitFor := func(n int) []*localv1.NodeState {
		t.Helper()
		for {
			if got := lines(); len(got) >= n {
				return got
			}
			select {
			case <-ctx.Done():
				t.Fatalf("fewer than %d documents written: %d", n, len(lines()))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	first := waitFor(1)[0]

	// Drop every Service of the example: the view empties.
	if err := os.WriteFile(in, []byte("apiVersion: v1\nkind: List\nitems: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := src.Load(klog.Background(), store); err != nil {
		t.Fatal(err)
	}
	got := waitFor(2)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a follow ended by its caller returned %v", err)
	}
	last := got[len(got)-1]
	if len(last.Services) != 0 {
		t.Errorf("last document has %d services, want none", len(last.Services))
	}
	if last.Revision <= first.Revision {
		t.Errorf("revision went from %d to %d, want it to grow", first.Revision, last.Revision)
	}
	if n := len(lines()); n != 2 {
		t.Errorf("wrote %d documents for two views, want 2", n)
	}
}
