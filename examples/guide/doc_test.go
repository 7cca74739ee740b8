package guide_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocSnippetsAreCompiled keeps docs/writing-a-backend.md honest: every
// line of its Go snippets must be a line of the code that the examples
// compile and test (this package, examples/custom-proxy) or of the
// interfaces it quotes from package backend, and every line of its
// protobuf snippets a line of api/localv1/localv1.proto, so a snippet
// cannot drift from the real API.
func TestDocSnippetsAreCompiled(t *testing.T) {
	doc, err := os.ReadFile("../../docs/writing-a-backend.md")
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]string{
		"go":    {"guide.go", "guide_test.go", "../custom-proxy/main.go", "../../backend/backend.go", "../../backend/incremental.go"},
		"proto": {"../../api/localv1/localv1.proto"},
	}
	known := map[string]map[string]bool{}
	for lang, files := range sources {
		known[lang] = map[string]bool{}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(src), "\n") {
				known[lang][strings.TrimSpace(line)] = true
			}
		}
	}
	snippets := map[string]int{}
	lang := "" // of the snippet being read; "" outside snippets we check
	in := false
	for i, line := range strings.Split(string(doc), "\n") {
		trimmed := strings.TrimSpace(line)
		if fence, ok := strings.CutPrefix(trimmed, "```"); ok {
			in = !in
			lang = ""
			if _, checked := known[fence]; in && checked {
				lang = fence
				snippets[lang]++
			}
			continue
		}
		if lang == "" || trimmed == "" || strings.HasPrefix(trimmed, "//") {
			continue // comments may summarize what a snippet leaves out
		}
		if !known[lang][trimmed] {
			t.Errorf("docs/writing-a-backend.md:%d: %s %q is not in the compiled code", i+1, lang, trimmed)
		}
	}
	if snippets["go"] < 6 || snippets["proto"] < 1 {
		t.Errorf("%v snippets found: is the guide still there?", snippets)
	}
	if !strings.Contains(string(doc), "os.Exit(kubeproxy.Execute(kubeproxy.NewCommand(proxy)))") {
		t.Error("the guide no longer shows examples/custom-proxy's main")
	}
}
