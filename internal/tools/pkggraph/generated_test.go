package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedUpToDate regenerates docs/architecture.md's pkggraph
// section and docs/img/architecture.svg in memory from `go list` and fails
// when the files in the tree differ: an import changed and nobody ran the
// generator.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	root := strings.TrimSpace(string(out))
	const docPath, svgPath = "docs/architecture.md", "docs/img/architecture.svg"
	g, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, docPath))
	if err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(root, svgPath))
	if err != nil {
		t.Fatal(err)
	}
	wantDoc, wantSVG, err := Generate(g, string(page), docPath, svgPath)
	if err != nil {
		t.Fatal(err)
	}
	const fix = "run `go run ./internal/tools/pkggraph` from the module root and commit the result"
	if string(page) != wantDoc {
		t.Errorf("%s: the pkggraph section differs from `go list` (%s); %s", docPath, firstDiff(string(page), wantDoc), fix)
	}
	if string(svg) != wantSVG {
		t.Errorf("%s differs from `go list` (%s); %s", svgPath, firstDiff(string(svg), wantSVG), fix)
	}
}

// firstDiff names the first line where have and want differ.
func firstDiff(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := range max(len(h), len(w)) {
		var a, b string
		if i < len(h) {
			a = h[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("line %d: have %q, want %q", i+1, a, b)
		}
	}
	return "no line differs"
}
