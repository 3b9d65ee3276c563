package proxy

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

// TestCompressedProtocol: a client that asks for the compressed protocol
// (zlib) gets it: go-sql-driver's compress=true and the mysql client's
// --compression-algorithms=zlib, with results larger than one frame's
// minimum, a write, an error and a prepared statement. Before, the proxy
// offered none and a client that required compression was refused by its
// own library with 2066 (MySQL's main.compress). zstd is not offered
// (compressedConn): the mysql client that requires it gets 2066.
func TestCompressedProtocol(t *testing.T) {
	s := startProxy(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openDB(t, s, "compress=true")
	emptyTable(t, db, "ptest", "compressed2", "id INT PRIMARY KEY, v MEDIUMTEXT")
	mustExec(t, db, "INSERT INTO ptest.compressed2 VALUES (1, REPEAT('z', 70000)), (2, 'short')")
	var n int
	if err := db.QueryRowContext(ctx, "SELECT LENGTH(v) FROM ptest.compressed2 WHERE id = ?", 1).Scan(&n); err != nil || n != 70000 {
		t.Fatalf("prepared read over zlib: %d, %v", n, err)
	}
	var big string
	if err := db.QueryRowContext(ctx, "SELECT REPEAT('ab', 200000)").Scan(&big); err != nil || len(big) != 400000 {
		t.Fatalf("a 400 kB value over zlib: %d bytes, %v", len(big), err)
	}
	if _, err := db.ExecContext(ctx, "SELECT * FROM ptest.no_such_table"); err == nil || !strings.Contains(err.Error(), "1146") {
		t.Fatalf("an error over zlib: %v", err)
	}

	// The link's own status, as MySQL reports its client's.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'Compression%'")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			t.Fatal(err)
		}
		got = append(got, name+"="+value)
	}
	rows.Close()
	conn.Close()
	if strings.Join(got, " ") != "Compression=ON Compression_algorithm=zlib Compression_level=6" {
		t.Fatalf("SHOW STATUS LIKE 'Compression%%' over zlib: %v", got)
	}
	var name, value string
	if err := openDB(t, s, "").QueryRowContext(ctx, "SHOW STATUS LIKE 'Compression'").Scan(&name, &value); err != nil || value != "OFF" {
		t.Fatalf("SHOW STATUS LIKE 'Compression' uncompressed: %s=%s, %v", name, value, err)
	}

	rootfs := compose.DefaultRootFS()
	if _, err := os.Stat(rootfs + "/usr/bin/mysql"); err != nil {
		t.Skip("mysql client not in the root filesystem")
	}
	host, port, _ := net.SplitHostPort(s.Addr())
	for _, algo := range []string{"zlib"} {
		out, err := exec.CommandContext(ctx, "chroot", rootfs, "mysql", "-h", host, "-P", port, "-u", "app", "-papppw",
			"--ssl-mode=DISABLED", "--get-server-public-key", "--compression-algorithms="+algo, "-N", "-B", "-e",
			"SELECT LENGTH(REPEAT('q', 100000)); SELECT COUNT(*) FROM ptest.compressed2;").CombinedOutput()
		if err != nil {
			t.Fatalf("mysql --compression-algorithms=%s: %v\n%s", algo, err, out)
		}
		if got := strings.Fields(strings.ReplaceAll(string(out), "mysql: [Warning] Using a password on the command line interface can be insecure.", "")); strings.Join(got, " ") != "100000 2" {
			t.Fatalf("mysql --compression-algorithms=%s: %q", algo, out)
		}
	}
}
