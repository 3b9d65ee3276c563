package proxy

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

// needSysbench returns sysbench's path or skips the test.
func needSysbench(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("sysbench")
	if err != nil {
		t.Skip("sysbench is not installed (scripts/install-bench-tools.sh installs Debian's package); skipping the sysbench runs")
	}
	return p
}

// sysbenchResult is what a sysbench run reports.
type sysbenchResult struct {
	out                          string
	transactions, queries        int64
	reads, writes                int64
	ignoredErrors, reconnects    int64
	tps, qps                     float64
	latAvgMS, latPctMS, latMaxMS float64
	// Filled by TestSysbenchSpeed for targets whose process it can see.
	cpuPerQueryUS, switchesPerQuery float64
	// machineCPUPerQueryUS is every CPU's busy time during the run per
	// query (sysbench, the hop, the three mysqld and the rest);
	// machineIdle the share of CPU time idle.
	machineCPUPerQueryUS, machineIdle float64
}

var (
	sbCount = regexp.MustCompile(`(?m)^\s*(read|write|other|total|transactions|queries|ignored errors|reconnects):\s+(\d+)(?:\s+\((\d+(?:\.\d+)?) per sec\.\))?`)
	sbLat   = regexp.MustCompile(`(?m)^\s*(min|avg|max|95th percentile|99th percentile):\s+([\d.]+)`)
)

func parseSysbench(out string) (sysbenchResult, error) {
	r := sysbenchResult{out: out}
	found := 0
	for _, m := range sbCount.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		rate, _ := strconv.ParseFloat(m[3], 64)
		switch m[1] {
		case "read":
			r.reads = n
		case "write":
			r.writes = n
		case "transactions":
			r.transactions, r.tps = n, rate
			found++
		case "queries":
			r.queries, r.qps = n, rate
			found++
		case "ignored errors":
			r.ignoredErrors = n
		case "reconnects":
			r.reconnects = n
		}
	}
	for _, m := range sbLat.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "avg":
			r.latAvgMS = v
		case "max":
			r.latMaxMS = v
		case "95th percentile", "99th percentile":
			r.latPctMS = v
		}
	}
	if found < 2 {
		return r, fmt.Errorf("sysbench output has no transaction/query counts:\n%s", out)
	}
	return r, nil
}

// sysbenchTarget is where sysbench connects.
type sysbenchTarget struct {
	host, port, user, password string
	ssl                        bool
}

func (tg sysbenchTarget) args(db string) []string {
	a := []string{"--db-driver=mysql", "--mysql-host=" + tg.host, "--mysql-port=" + tg.port,
		"--mysql-user=" + tg.user, "--mysql-password=" + tg.password, "--mysql-db=" + db}
	if tg.ssl {
		a = append(a, "--mysql-ssl=on")
	}
	return a
}

func proxyTarget(t testing.TB, s *Server, ssl bool) sysbenchTarget {
	host, port, ok := strings.Cut(s.Addr(), ":")
	if !ok {
		t.Fatalf("proxy address %q", s.Addr())
	}
	return sysbenchTarget{host: host, port: port, user: "app", password: "apppw", ssl: ssl}
}

// sysbenchTLSDir writes the files sysbench 1.0's MySQL driver loads, from
// its working directory, when --mysql-ssl=on (cacert.pem, client-cert.pem,
// client-key.pem: the names are hard-coded) and returns the directory and
// the proxy's certificate and key files (signed for 127.0.0.1, the CA
// sysbench trusts).
func sysbenchTLSDir(t testing.TB) (dir, cert, key string) {
	t.Helper()
	dir = t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	selfSigned := func(cn string, ips []net.IP) ([]byte, []byte) {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true, IsCA: true, IPAddresses: ips, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		return der, x509.MarshalPKCS1PrivateKey(k)
	}
	sc, sk := selfSigned("causallab-proxy-test", []net.IP{net.ParseIP("127.0.0.1")})
	cert = write("server-cert.pem", "CERTIFICATE", sc)
	key = write("server-key.pem", "RSA PRIVATE KEY", sk)
	write("cacert.pem", "CERTIFICATE", sc)
	cc, ck := selfSigned("sysbench-client", nil)
	write("client-cert.pem", "CERTIFICATE", cc)
	write("client-key.pem", "RSA PRIVATE KEY", ck)
	return dir, cert, key
}

// runSysbench runs one sysbench command (in dir, when not "") and parses
// the result of "run".
func runSysbench(ctx context.Context, t testing.TB, bin, dir string, args ...string) (sysbenchResult, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return sysbenchResult{out: string(out)}, fmt.Errorf("sysbench %s: %w\n%s", strings.Join(redact(args), " "), err, out)
	}
	if args[len(args)-1] != "run" {
		return sysbenchResult{out: string(out)}, nil
	}
	return parseSysbench(string(out))
}

// redact hides passwords in a sysbench command line.
func redact(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.HasPrefix(a, "--mysql-password=") {
			a = "--mysql-password=***"
		}
		out[i] = a
	}
	return out
}

// primaryDB opens a direct connection to the topology's primary.
func primaryDB(t testing.TB, tp *compose.Topology) *sql.DB {
	t.Helper()
	p := tp.Primary()
	db, err := sql.Open("mysql", p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestSysbench runs sysbench's oltp_read_write and oltp_point_select through
// the proxy with prepared statements on (--db-ps-mode=auto: the MariaDB
// client library sysbench links prepares every statement server-side),
// once per client authentication the proxy offers, and checks the results:
// sysbench finished without errors or reconnects, the tables hold exactly
// table_size rows afterwards (oltp_read_write deletes and re-inserts), the
// replicas converge to the primary's checksums, and prepared point selects
// were served by replicas (router outcome "replica").
func TestSysbench(t *testing.T) {
	bin := needSysbench(t)
	const tables, tableSize = 2, 2000
	cases := []struct {
		name, auth string
		ssl        bool
	}{
		// caching_sha2_password needs a secure channel: TLS here.
		{"caching_sha2_tls", "caching_sha2_password", true},
		{"native_password", "mysql_native_password", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var dir, cert, key string
			if c.ssl {
				dir, cert, key = sysbenchTLSDir(t)
			}
			s := startProxy(t, func(cfg *Config) { cfg.AuthMethod, cfg.TLSCert, cfg.TLSKey = c.auth, cert, key })
			direct := primaryDB(t, topo)
			db := "sb_" + c.name
			mustExec(t, direct, "DROP DATABASE IF EXISTS "+db)
			mustExec(t, direct, "CREATE DATABASE "+db)
			t.Cleanup(func() { _, _ = direct.Exec("DROP DATABASE IF EXISTS " + db) })
			common := append(proxyTarget(t, s, c.ssl).args(db),
				fmt.Sprintf("--tables=%d", tables), fmt.Sprintf("--table-size=%d", tableSize),
				"--db-ps-mode=auto", "--threads=4", "--time=3", "--report-interval=0", "--histogram=off")
			if _, err := runSysbench(ctx, t, bin, dir, append(append([]string{"oltp_read_write"}, common...), "prepare")...); err != nil {
				t.Fatal(err)
			}
			for _, test := range []string{"oltp_read_write", "oltp_point_select"} {
				r, err := runSysbench(ctx, t, bin, dir, append(append([]string{test}, common...), "run")...)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %d transactions (%.0f/s), %d queries (%d reads, %d writes), %d ignored errors, %d reconnects, avg %.2f ms, p95 %.2f ms",
					test, r.transactions, r.tps, r.queries, r.reads, r.writes, r.ignoredErrors, r.reconnects, r.latAvgMS, r.latPctMS)
				if r.transactions == 0 || r.reads == 0 {
					t.Fatalf("%s did no work:\n%s", test, r.out)
				}
				if r.reconnects != 0 {
					t.Fatalf("%s: %d reconnects:\n%s", test, r.reconnects, r.out)
				}
				if test == "oltp_read_write" && r.writes == 0 {
					t.Fatalf("oltp_read_write wrote nothing:\n%s", r.out)
				}
				if test == "oltp_point_select" && r.ignoredErrors != 0 {
					t.Fatalf("oltp_point_select: %d ignored errors:\n%s", r.ignoredErrors, r.out)
				}
			}
			// oltp_read_write deletes a row and inserts it back in each
			// transaction: the row count is unchanged when nothing was lost
			// or doubled.
			for i := 1; i <= tables; i++ {
				var n int
				if err := direct.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s.sbtest%d", db, i)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != tableSize {
					t.Errorf("%s.sbtest%d holds %d rows after the runs, want %d", db, i, n, tableSize)
				}
			}
			if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			want := checksums(ctx, t, direct, db, tables)
			for _, r := range topo.Replicas() {
				rdb, err := sql.Open("mysql", r.User+":"+r.Password+"@tcp("+r.Addr()+")/")
				if err != nil {
					t.Fatal(err)
				}
				got := checksums(ctx, t, rdb, db, tables)
				rdb.Close()
				if got != want {
					t.Errorf("replica %s checksums %s, primary %s", r.Name, got, want)
				}
			}
			stats := metricText(t, s)
			if !strings.Contains(stats, `causallab_proxy_statements_total{kind="execute-read",role="replica"}`) {
				t.Errorf("no prepared read reached a replica:\n%s", grepLines(stats, "statements_total"))
			}
			if !regexp.MustCompile(`causallab_router_reads_total\{outcome="replica",policy="token-wait",reason="[^"]+"\} [1-9]`).MatchString(stats) {
				t.Errorf("no read counted with router outcome replica:\n%s", grepLines(stats, "router_reads_total"))
			}
			if strings.Contains(stats, `causallab_proxy_client_errors_total`) {
				t.Errorf("the proxy returned errors of its own:\n%s", grepLines(stats, "client_errors_total"))
			}
		})
	}
}

func checksums(ctx context.Context, t testing.TB, db *sql.DB, schema string, tables int) string {
	t.Helper()
	var parts []string
	for i := 1; i <= tables; i++ {
		var name string
		var sum sql.NullInt64
		if err := db.QueryRowContext(ctx, fmt.Sprintf("CHECKSUM TABLE %s.sbtest%d", schema, i)).Scan(&name, &sum); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, sum.Int64))
	}
	return strings.Join(parts, ",")
}
