package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeRun(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRunsSection(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, "kpng-nft.txt", `label: kpng nft
proxy: kpng
mode: nft
date: 2026-11-25T15:00Z
kpng: abc123
kubernetes: v1.36.3
focus: \[sig-network\] (Services|Conntrack)
seconds: 100
ran: Ran 3 of 7000 Specs in 99.1 seconds
result: FAIL! -- 1 Passed | 2 Failed | 0 Pending | 6997 Skipped
failed:
  [FAIL] [sig-network] Services [It] should a
  [FAIL] [sig-network] Services [It] should b
`)
	// Another suite's run is no reference for the Services runs.
	writeRun(t, dir, "kube-proxy-nft-Conntrack.txt", `label: kube-proxy nft (Conntrack)
proxy: kube-proxy
mode: nft
suite: Conntrack
date: 2026-11-25T16:00Z
result: SUCCESS! -- 3 Passed | 0 Failed | 0 Pending | 6997 Skipped
ran: Ran 3 of 7000 Specs in 80 seconds
passed:
- [sig-network] Conntrack should x: udp
- [sig-network] Conntrack should y
failed:
`)
	writeRun(t, dir, "kube-proxy-nft.txt", `label: kube-proxy nft
proxy: kube-proxy
mode: nft
date: 2026-11-25T16:00Z
result: FAIL! -- 2 Passed | 1 Failed | 0 Pending | 6997 Skipped
ran: Ran 3 of 7000 Specs in 80 seconds
failed:
  [FAIL] [sig-network] Services [It] should b
`)
	doc := filepath.Join(dir, "doc.md")
	if err := os.WriteFile(doc, []byte("# T\n\n## Runs\n\nold table\n\n## Notes on the runs\n\n- a note\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mainErr(dir, doc); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	got := string(b)
	for _, want := range []string{
		"| kpng nft | 3 | 1 | 2 | 6997 |",
		"`\\[sig-network\\] (Services\\|Conntrack)` | 100 |",
		"| kube-proxy nft | 3 | 2 | 1 | 6997 |",
		"- [sig-network] Services [It] should a **(kube-proxy nft passes it)**",
		"- [sig-network] Services [It] should b (kube-proxy nft fails it too)",
		"## Notes on the runs\n\n- a note\n",
		"### Passed in kube-proxy nft (Conntrack)\n\n- [sig-network] Conntrack should x: udp\n- [sig-network] Conntrack should y\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("document lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old table") {
		t.Errorf("the old Runs section was kept:\n%s", got)
	}
	if strings.Index(got, "kpng nft |") > strings.Index(got, "kube-proxy nft |") {
		t.Errorf("kpng's rows should come first:\n%s", got)
	}
}

func TestBadRun(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, "x.txt", "label: x\nproxy: kpng\nmode: nft\ndate: d\nresult: interrupted\n")
	doc := filepath.Join(dir, "doc.md")
	os.WriteFile(doc, []byte("## Runs\n## Notes on the runs\n"), 0o644)
	err := mainErr(dir, doc)
	if err == nil || !strings.Contains(err.Error(), "no Ginkgo counts") {
		t.Fatalf("want an error naming the bad result line, got %v", err)
	}
}

func TestPassedSpecs(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "junit_01.xml")
	writeRun(t, filepath.Dir(junit), "junit_01.xml", `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4">
  <testsuite name="Kubernetes e2e suite" tests="4">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.1"></testcase>
    <testcase name="[It] [sig-network] KubeProxy should set TCP CLOSE_WAIT timeout [Privileged] [sig-network]" classname="Kubernetes e2e suite" status="failed" time="1"><failure type="failed">boom</failure></testcase>
    <testcase name="[It] [sig-network] Topology Hints should distribute endpoints evenly [sig-network]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[It] [sig-network] Services should work after restarting kube-proxy [Disruptive] [sig-network, Disruptive]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[It] [sig-network] Services should a &#39;b&#39;" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite>
</testsuites>
`)
	got, err := passedSpecs(junit)
	if err != nil {
		t.Fatal(err)
	}
	want := "[sig-network] Services should work after restarting kube-proxy [Disruptive] [sig-network, Disruptive]\n" +
		"[sig-network] Topology Hints should distribute endpoints evenly [sig-network]"
	if strings.Join(got, "\n") != want {
		t.Errorf("passed specs:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
	if _, err := passedSpecs(filepath.Join(t.TempDir(), "none.xml")); err == nil {
		t.Error("a missing report was not an error")
	}
}
