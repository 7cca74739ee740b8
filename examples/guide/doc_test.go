package guide_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocSnippetsAreCompiled keeps docs/writing-a-backend.md honest: every
// line of its Go snippets must be a line of the code that this package
// compiles and tests (or of the interfaces it quotes from package backend),
// so a snippet cannot drift from the real API.
func TestDocSnippetsAreCompiled(t *testing.T) {
	doc, err := os.ReadFile("../../docs/writing-a-backend.md")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range []string{"guide.go", "guide_test.go", "../../backend/backend.go", "../../backend/incremental.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			known[strings.TrimSpace(line)] = true
		}
	}
	snippets, in := 0, false
	for i, line := range strings.Split(string(doc), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "```go":
			in = true
			snippets++
			continue
		case trimmed == "```":
			in = false
			continue
		case !in, trimmed == "", strings.HasPrefix(trimmed, "//"):
			continue // comments may summarize what a snippet leaves out
		}
		if !known[trimmed] {
			t.Errorf("docs/writing-a-backend.md:%d: %q is not in the compiled code", i+1, trimmed)
		}
	}
	if snippets < 5 {
		t.Errorf("%d Go snippets found: is the guide still there?", snippets)
	}
}
