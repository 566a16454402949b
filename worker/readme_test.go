package worker_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// readmeWorkerProgram returns the Go program between the sdk-example
// markers of the repository's README.md, exactly as written.
func readmeWorkerProgram(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "<!-- sdk-example:start -->")
	end := strings.Index(readme, "<!-- sdk-example:end -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no sdk-example markers")
	}
	block := readme[start:end]
	open := strings.Index(block, "```go\n")
	closing := strings.LastIndex(block, "```")
	if open < 0 || closing <= open {
		t.Fatal("the sdk-example has no ```go block")
	}
	return block[open+len("```go\n") : closing]
}

// body returns the lines of the function declared by header in src,
// without its braces and with one level of indentation removed.
func body(t *testing.T, src, header string) []string {
	t.Helper()
	i := strings.Index(src, header)
	if i < 0 {
		t.Fatalf("no %q in the source", header)
	}
	var out []string
	for _, line := range strings.Split(src[i+len(header):], "\n")[1:] {
		if line == "}" {
			return out
		}
		out = append(out, strings.TrimPrefix(line, "\t"))
	}
	t.Fatalf("%q is not closed", header)
	return nil
}

// The README's ten-line worker is the package's Example, so the program a
// reader copies is the one that compiles with every change (and
// e2e/worker runs it against a coordinator).
func TestREADMEWorkerIsTheExample(t *testing.T) {
	t.Parallel()
	readme := body(t, readmeWorkerProgram(t), "func main() {")
	src, err := os.ReadFile("example_worker_test.go")
	if err != nil {
		t.Fatal(err)
	}
	example := body(t, string(src), "func Example() {")
	if strings.Join(readme, "\n") != strings.Join(example, "\n") {
		t.Fatalf("README's main differs from Example in example_worker_test.go:\nREADME:\n%s\n\nExample:\n%s",
			strings.Join(readme, "\n"), strings.Join(example, "\n"))
	}
}
