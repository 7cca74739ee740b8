// Package jsonconsumer holds the test of consume.py, the non-Go consumer of
// `kpng ... to-file --follow --format json`.
package jsonconsumer

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/sink/tofile"
	"github.com/kpng/kpng/source/file"
	"k8s.io/klog/v2"
)

// TestConsumeFollowsTheView feeds consume.py the JSON lines the to-file
// sink writes for two revisions of the example cluster's view.
func TestConsumeFollowsTheView(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed to test the non-Go consumer example (Debian: apt-get install python3)")
	}
	store := cluster.NewStore()
	src := &file.Source{Path: "../cluster.yaml"}
	if err := src.Load(klog.Background(), store); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()
	view := brain.NewView(brain.Options{NodeName: "node-1"})
	var in bytes.Buffer
	line := func() {
		store.View(func(r cluster.Reader) { view.Update(r) })
		doc, err := tofile.Marshal(view.State(), "json", false)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(doc)
	}
	line()
	store.Update(func(tx *cluster.Tx) { tx.DeleteService("default", "web") })
	line()

	cmd := exec.Command(python, "consume.py")
	cmd.Stdin = &in
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("consume.py: %v\n%s", err, out)
	}
	for _, want := range []string{
		"# revision 1 of node-1",
		"+ default/web/ipv4 10.96.0.10:80,443 -> 10.244.1.5:8080 10.244.1.5:8443",
		"# revision 2 of node-1",
		"- default/web/ipv4",
		"- default/web/ipv6",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
