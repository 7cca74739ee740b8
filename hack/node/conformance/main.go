// Command conformance writes the "Runs" section of docs/conformance.md from
// the runs hack/e2e-node.sh --record kept: one file per configuration (kpng
// nft, kube-proxy iptables, kpng nft split, ...), each holding that run's
// Ginkgo summary and failed specs. The section is a table of pass counts
// and, for every spec kpng fails that kube-proxy passes in the same mode,
// a line the notes below it must explain.
//
//	go run ./conformance --runs ../../docs/conformance-runs --doc ../../docs/conformance.md
package main

import (
	"bufio"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// run is one recorded run: the "key: value" header lines of its file, and
// the specs listed after "passed:" and after "failed:".
type run struct {
	label   string // e.g. "kpng nft split"
	proxy   string // kpng or kube-proxy
	mode    string // nft or iptables
	fields  map[string]string
	counts  map[string]int // Passed, Failed, Pending, Skipped
	ran     string         // "Ran N of M Specs in S seconds"
	passed  []string
	failed  []string
	fileRef string
}

var (
	countRE = regexp.MustCompile(`(\d+) (Passed|Failed|Pending|Skipped)`)
	// A failed spec's line from Ginkgo's summary, without the location
	// Ginkgo may append; its text is what two runs compare on.
	failRE = regexp.MustCompile(`^\s*\[(FAIL|TIMEDOUT|PANICKED|INTERRUPTED)\]\s*(.*?)\s*$`)
)

func parseRun(path string) (*run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &run{fields: map[string]string{}, counts: map[string]int{}, fileRef: filepath.Base(path)}
	section := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "passed:" || line == "failed:" {
			section = strings.TrimSuffix(line, ":")
			continue
		}
		switch section {
		case "passed":
			if name, ok := strings.CutPrefix(line, "- "); ok {
				r.passed = append(r.passed, name)
			}
			continue
		case "failed":
			if m := failRE.FindStringSubmatch(line); m != nil {
				r.failed = append(r.failed, m[2])
			}
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		r.fields[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, k := range []string{"label", "proxy", "mode", "date", "result"} {
		if r.fields[k] == "" {
			return nil, fmt.Errorf("%s: no %q line", path, k)
		}
	}
	r.label, r.proxy, r.mode, r.ran = r.fields["label"], r.fields["proxy"], r.fields["mode"], r.fields["ran"]
	for _, m := range countRE.FindAllStringSubmatch(r.fields["result"], -1) {
		var n int
		fmt.Sscan(m[1], &n)
		r.counts[m[2]] = n
	}
	if _, ok := r.counts["Passed"]; !ok {
		return nil, fmt.Errorf("%s: result line %q has no Ginkgo counts", path, r.fields["result"])
	}
	slices.Sort(r.failed)
	r.failed = slices.Compact(r.failed)
	return r, nil
}

// render is the Runs section: the table, then per kpng configuration the
// specs it fails that kube-proxy in the same mode passes.
func render(runs []*run) string {
	var b strings.Builder
	b.WriteString("<!-- written by hack/node/conformance from docs/conformance-runs; do not edit by hand -->\n\n")
	b.WriteString("| configuration | ran | passed | failed | skipped | date | kpng | Kubernetes | focus | seconds |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %s | %s | `%s` | %s |\n",
			r.label, ranCount(r.ran), r.counts["Passed"], r.counts["Failed"], r.counts["Skipped"],
			r.fields["date"], r.fields["kpng"], r.fields["kubernetes"], cell(r.fields["focus"]), r.fields["seconds"])
	}
	// kube-proxy's run of the same mode and suite is each kpng run's
	// reference.
	refs := map[string]*run{}
	for _, r := range runs {
		if r.proxy == "kube-proxy" {
			refs[r.mode+" "+r.suite()] = r
		}
	}
	// A short focus's specs are named, so that the table says which
	// of them ran.
	for _, r := range runs {
		if len(r.passed) == 0 || len(r.passed) > maxNamed {
			continue
		}
		fmt.Fprintf(&b, "\n### Passed in %s\n\n", r.label)
		for _, p := range r.passed {
			fmt.Fprintf(&b, "- %s\n", p)
		}
	}
	for _, r := range runs {
		if len(r.failed) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### Failed in %s\n\n", r.label)
		var ref *run
		if r.proxy == "kpng" {
			ref = refs[r.mode+" "+r.suite()]
		}
		for _, f := range r.failed {
			note := ""
			if ref != nil && !slices.Contains(ref.failed, f) {
				note = " **(kube-proxy " + r.mode + " passes it)**"
			} else if ref != nil {
				note = " (kube-proxy " + r.mode + " fails it too)"
			}
			fmt.Fprintf(&b, "- %s%s\n", f, note)
		}
	}
	return b.String()
}

// suite is the focus the run had: Services (what runs recorded before
// the field existed ran), Conntrack, ...
func (r *run) suite() string {
	if s := r.fields["suite"]; s != "" {
		return s
	}
	return "Services"
}

func ranCount(ran string) string {
	var n, m int
	if _, err := fmt.Sscanf(ran, "Ran %d of %d", &n, &m); err != nil {
		return "?"
	}
	return fmt.Sprint(n)
}

// order puts kpng's configurations first, then kube-proxy's, each by mode.
func order(runs []*run) {
	sort.SliceStable(runs, func(i, j int) bool {
		if runs[i].proxy != runs[j].proxy {
			return runs[i].proxy == "kpng"
		}
		return runs[i].label < runs[j].label
	})
}

// maxNamed is the most passed specs a run's section names.
const maxNamed = 12

const (
	startMark = "## Runs\n"
	endMark   = "## Notes on the runs\n"
)

func update(doc string, section string) (string, error) {
	a := strings.Index(doc, startMark)
	b := strings.Index(doc, endMark)
	if a < 0 || b < a {
		return "", errors.New("the document needs a \"## Runs\" heading followed by \"## Notes on the runs\"")
	}
	return doc[:a+len(startMark)] + "\n" + section + "\n" + doc[b:], nil
}

func main() {
	runsDir := flag.String("runs", "docs/conformance-runs", "folder of recorded runs (*.txt)")
	docPath := flag.String("doc", "docs/conformance.md", "the document whose Runs section is rewritten")
	junit := flag.String("passed", "", "instead: print the specs a Ginkgo JUnit report says passed, as \"- name\" lines")
	flag.Parse()
	if *junit != "" {
		names, err := passedSpecs(*junit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			os.Exit(1)
		}
		for _, n := range names {
			fmt.Println("- " + n)
		}
		return
	}
	if err := mainErr(*runsDir, *docPath); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func mainErr(runsDir, docPath string) error {
	files, err := filepath.Glob(filepath.Join(runsDir, "*.txt"))
	if err != nil {
		return err
	}
	var runs []*run
	for _, f := range files {
		r, err := parseRun(f)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	order(runs)
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	out, err := update(string(doc), render(runs))
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	return os.WriteFile(docPath, []byte(out), 0o644)
}

// passedSpecs reads a Ginkgo JUnit report and returns the names of the
// specs whose status is "passed", sorted, without Ginkgo's "[It] " mark.
func passedSpecs(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var report struct {
		Suites []struct {
			Cases []struct {
				Name   string `xml:"name,attr"`
				Status string `xml:"status,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &report); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, s := range report.Suites {
		for _, c := range s.Cases {
			if c.Status == "passed" && strings.Contains(c.Name, "[It]") {
				names = append(names, strings.Join(strings.Fields(strings.Replace(c.Name, "[It] ", "", 1)), " "))
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// cell escapes a table cell's pipes, which would split it even inside a
// code span (a focus such as "(Conntrack|Networking)").
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
