package compose

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestParseImageOutput(t *testing.T) {
	info, err := parseImageOutput("rootfs=/c/mysql-rootfs\nimage=causallab/mysql:9.7.4\nversion=9.7.4\n")
	if err != nil || info != (ImageInfo{RootFS: "/c/mysql-rootfs", Image: "causallab/mysql:9.7.4", Version: "9.7.4"}) {
		t.Fatalf("%+v %v", info, err)
	}
	info, err = parseImageOutput("rootfs=/r\nimage=\nversion=9.7.4\n")
	if err != nil || info.Image != "" {
		t.Fatalf("no-docker output: %+v %v", info, err)
	}
	for _, bad := range []string{"", "rootfs=/r\n", "hello\n", "rootfs=/r\nversion=1\nversion=2\n", "rootfs=/r\nversion=1\ncolour=red\n"} {
		if _, err := parseImageOutput(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseImageOutput(f *testing.F) {
	f.Add("rootfs=/c/mysql-rootfs\nimage=causallab/mysql:9.7.4\nversion=9.7.4\n")
	f.Add("rootfs=/r\nimage=\nversion=9.7.4")
	f.Add("=\n==\n")
	f.Fuzz(func(t *testing.T, s string) {
		info, err := parseImageOutput(s)
		if err == nil && (info.RootFS == "" || info.Version == "") {
			t.Fatalf("accepted %q as %+v", s, info)
		}
	})
}

// TestEnsureImageCached runs the real script against the machine's cache:
// with the root filesystem present it must only report it.
func TestEnsureImageCached(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ensure-mysql.sh")
	}
	if _, err := os.Stat(DefaultRootFS() + "/usr/sbin/mysqld"); err != nil {
		t.Skip("no cached root filesystem")
	}
	info, err := EnsureImage(context.Background(), ImageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.RootFS != DefaultRootFS() || !strings.HasPrefix(info.Version, "9.") {
		t.Fatalf("%+v", info)
	}
	if info.Image != "" && info.Image != DefaultImage(info.RootFS) {
		t.Fatalf("image %q, want %q", info.Image, DefaultImage(info.RootFS))
	}
}
