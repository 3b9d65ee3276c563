package scripts

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runTarStep runs the embedded ensure-engine.sh's tar step (what docker
// import reads) on root filesystem dir, with PATH prefixed by pathDir
// when it is not empty, and returns the names in the stream.
func runTarStep(t *testing.T, dir, pathDir string) ([]string, error) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "ensure-engine.sh")
	if err := os.WriteFile(script, []byte(EnsureEngine()), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script, "tar", dir)
	if pathDir != "" {
		cmd.Env = append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, errors.Join(err, errors.New(stderr.String()))
	}
	var names []string
	tr := tar.NewReader(&stdout)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			t.Fatalf("the tar step wrote no tar stream: %v", err)
		}
		names = append(names, strings.TrimPrefix(h.Name, "./"))
	}
}

// fakeRootFS is a root filesystem that a topology ran on: a data
// directory and a stray log under tmp, scratch under var/tmp, a pid under
// run and a client history in root's home.
func fakeRootFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"usr/sbin/mysqld":          "#!/bin/sh\n",
		"etc/passwd":               "root:x:0:0::/root:/bin/sh\n",
		"root/.bashrc":             "# kept\n",
		".causallab-mysql-version": "9.7.4\n",
		"tmp/causallab-2471967587/primary/data/ibdata1": strings.Repeat("x", 1<<16),
		"tmp/gl-replica1.log":                           "stray\n",
		"var/tmp/scratch":                               "x",
		"run/mysqld/mysqld.pid":                         "42\n",
		"root/.mysql_history":                           "SELECT 1;\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImageTarExcludesRuntimeState: the image holds the root filesystem
// as built: the tar step keeps the server, /etc and the tmp directory
// itself, and leaves out what ran in it (a topology's data directories
// under tmp: 353 MB of an 846 MB image once).
func TestImageTarExcludesRuntimeState(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar")
	}
	names, err := runTarStep(t, fakeRootFS(t), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usr/sbin/mysqld", "etc/passwd", "root/.bashrc", ".causallab-mysql-version", "tmp/", "var/tmp/"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s missing from the image's stream: %v", want, names)
		}
	}
	for _, n := range names {
		for _, bad := range []string{"tmp/causallab-", "tmp/gl-", "var/tmp/scratch", "run/mysqld/", "root/.mysql_history"} {
			if strings.HasPrefix(n, bad) {
				t.Errorf("runtime state %s in the image's stream", n)
			}
		}
	}
}

// TestImageTarChangedFiles: GNU tar exits 1 when a file changes while it
// is read (a topology running on the root filesystem); under pipefail
// that failed the import. Exit 1 passes, exit 2 (fatal) fails.
func TestImageTarChangedFiles(t *testing.T) {
	realTar, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar")
	}
	dir := fakeRootFS(t)
	for code, wantOK := range map[int]bool{1: true, 2: false} {
		bin := t.TempDir()
		fake := "#!/bin/sh\n" + realTar + " \"$@\"\nexit " + string(rune('0'+code)) + "\n"
		if err := os.WriteFile(filepath.Join(bin, "tar"), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
		names, err := runTarStep(t, dir, bin)
		if (err == nil) != wantOK {
			t.Errorf("tar exiting %d: err %v, want ok=%v", code, err, wantOK)
		}
		if wantOK && !slices.Contains(names, "usr/sbin/mysqld") {
			t.Errorf("tar exiting %d: stream %v", code, names)
		}
	}
}
