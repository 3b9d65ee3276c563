// Package complexity holds the test that keeps the proxy's and the
// router's functions small: none above cyclomatic complexity 25, counted
// as gocyclo counts (github.com/fzipp/gocyclo). Split a function that
// grows past it by decision (one function per kind of message or
// outcome, as etcd raft's step* functions), not by line count.
package complexity

import (
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"github.com/fzipp/gocyclo"
)

// maxComplexity is the largest cyclomatic complexity a non-test function
// in the checked trees may have.
const maxComplexity = 25

// checked are the trees (module-relative) whose non-test functions are
// held to maxComplexity, their subpackages included.
var checked = []string{"proxy", "router"}

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func TestFunctionsStaySmall(t *testing.T) {
	root := moduleRoot(t)
	var dirs []string
	for _, d := range checked {
		dirs = append(dirs, filepath.Join(root, d))
	}
	all := gocyclo.Analyze(dirs, regexp.MustCompile(`_test\.go$|/testdata/`))
	if len(all) < 200 {
		t.Fatalf("found only %d functions under %v: wrong module root %s?", len(all), checked, root)
	}
	for _, s := range all.SortAndFilter(-1, maxComplexity) {
		rel, _ := filepath.Rel(root, s.Pos.Filename)
		t.Errorf("%s:%d: %s.%s has cyclomatic complexity %d (at most %d): split it by decision",
			rel, s.Pos.Line, s.PkgName, s.FuncName, s.Complexity, maxComplexity)
	}
}
