package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/internal/rawnet"
)

// BenchmarkPointSelect drives sysbench's oltp_point_select through the
// proxy in this process, one client connection, against the shared
// topology: a prepared `SELECT c FROM sbtest1 WHERE id=?` executed as
// libmysqlclient does (parameter types sent at the first execution only),
// relayed raw to a replica. Besides ns/op (which includes the replica's
// mysqld) it reports the process's CPU time and context switches per
// query (getrusage: the proxy, its pollers and this client) and
// allocations per query; "direct" runs the same client against a replica
// itself, the client's own share. Under -short or without a topology it
// skips.
//
//	go test -run '^$' -bench PointSelect -benchmem -benchtime 20000x ./proxy/
func BenchmarkPointSelect(b *testing.B) {
	composetest.Need(b, topo)
	db := primaryDB(b, topo)
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS bench_ps",
		"CREATE TABLE IF NOT EXISTS bench_ps.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL)",
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM bench_ps.sbtest1").Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n < benchRows {
		var sb strings.Builder
		sb.WriteString("INSERT IGNORE INTO bench_ps.sbtest1 VALUES ")
		for i := 1; i <= benchRows; i++ {
			if i > 1 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "(%d,%d,'%0120d','%060d')", i, i*7%benchRows, i, i)
		}
		if _, err := db.Exec(sb.String()); err != nil {
			b.Fatal(err)
		}
	}
	if err := topo.WaitReplicated(context.Background(), time.Minute); err != nil {
		b.Fatal(err)
	}
	r0 := topo.Replicas()[0]
	b.Run("direct", func(b *testing.B) {
		benchPointSelects(b, r0.Addr(), r0.User, r0.Password)
	})
	// The floor of any Go hop: the raw byte forwarder of TestSysbenchSpeed
	// (rawnet socket I/O, no protocol work) in front of the same replica.
	b.Run("forwarder", func(b *testing.B) {
		host, port, err := net.SplitHostPort(r0.Addr())
		if err != nil {
			b.Fatal(err)
		}
		fwd := startGoForwarder(b, []string{host}, []string{port}, true)
		benchPointSelects(b, net.JoinHostPort("127.0.0.1", strconv.Itoa(fwd)), r0.User, r0.Password)
	})
	// CAUSALLAB_PROXY_BENCH_POLL_INTERVAL sets the proxy's poll_interval
	// (default the config's): the pollers' cost is per second, not per
	// query.
	var poll time.Duration
	if v := os.Getenv("CAUSALLAB_PROXY_BENCH_POLL_INTERVAL"); v != "" {
		var err error
		if poll, err = time.ParseDuration(v); err != nil {
			b.Fatalf("CAUSALLAB_PROXY_BENCH_POLL_INTERVAL: %v", err)
		}
	}
	// CAUSALLAB_PROXY_BENCH_POLL_IDLE_INTERVAL its poll_idle_interval
	// (default the config's; equal to poll_interval: always fast).
	var idle time.Duration
	if v := os.Getenv("CAUSALLAB_PROXY_BENCH_POLL_IDLE_INTERVAL"); v != "" {
		var err error
		if idle, err = time.ParseDuration(v); err != nil {
			b.Fatalf("CAUSALLAB_PROXY_BENCH_POLL_IDLE_INTERVAL: %v", err)
		}
	}
	for _, pol := range []string{"token-ryw", "token-ryw-mr", "token-wait"} {
		b.Run(pol, func(b *testing.B) {
			s := startProxy(b, func(c *Config) {
				c.AuthMethod, c.Policy, c.HTTPListen = "mysql_native_password", pol, ""
				c.PollInterval, c.PollIdleInterval = poll, idle
			})
			benchPointSelects(b, s.Addr(), "app", "apppw")
		})
	}
}

const benchRows = 1000

// benchPointSelects logs in to addr and runs b.N point selects, reporting
// the process's CPU time and context switches per query.
func benchPointSelects(b *testing.B, addr, user, password string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := &net.Dialer{Timeout: 10 * time.Second}
	// The client's socket I/O is raw system calls too (rawnet): an
	// ordinary one wakes the runtime's sysmon at every query (the
	// process is idle between them), whose wake-ups and sleeps then
	// dominate the process's switches and CPU and are not the hop's.
	cc, err := client.ConnectWithDialer(ctx, "tcp", addr, user, password, "", rawnet.WrapDial(d.DialContext), func(c *client.Conn) error {
		// As the proxy talks to its clients: no query attributes (no
		// parameter names in executions), classic EOF packets.
		c.UnsetCapability(mysql.CLIENT_QUERY_ATTRIBUTES | mysql.CLIENT_DEPRECATE_EOF)
		return nil
	})
	if err != nil {
		b.Fatalf("login to %s: %v", addr, err)
	}
	b.Cleanup(func() { cc.Close() })
	st, err := cc.Prepare("SELECT c FROM bench_ps.sbtest1 WHERE id=?")
	if err != nil {
		b.Fatal(err)
	}
	id := st.ID
	nc := cc.Conn.Conn
	br := bufio.NewReaderSize(nc, 16<<10)
	var (
		pkt  []byte
		hdr  [4]byte
		cmd  []byte
		sent int
	)
	// One execution: COM_STMT_EXECUTE with the parameter types on the
	// first, without (new-params-bound 0) after, as libmysqlclient sends.
	exec := func(key int) {
		cmd = append(cmd[:0], 0, 0, 0, 0, mysql.COM_STMT_EXECUTE)
		cmd = binary.LittleEndian.AppendUint32(cmd, id)
		cmd = append(cmd, 0, 1, 0, 0, 0, 0) // flags, iteration count, NULL bitmap
		if sent == 0 {
			cmd = append(cmd, 1, mysql.MYSQL_TYPE_LONG, 0)
		} else {
			cmd = append(cmd, 0)
		}
		cmd = binary.LittleEndian.AppendUint32(cmd, uint32(key))
		n := len(cmd) - 4
		cmd[0], cmd[1], cmd[2] = byte(n), byte(n>>8), byte(n>>16)
		sent++
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := nc.Write(cmd); err != nil {
			b.Fatal(err)
		}
		// Column count, one definition, EOF, the row, EOF.
		eofs := 0
		for i := 0; eofs < 2; i++ {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				b.Fatal(err)
			}
			l := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
			if cap(pkt) < l {
				pkt = make([]byte, l)
			}
			pkt = pkt[:l]
			if _, err := io.ReadFull(br, pkt); err != nil {
				b.Fatal(err)
			}
			switch {
			case i == 0 && l > 0 && pkt[0] == mysql.ERR_HEADER:
				b.Fatalf("execute: %s", pkt[9:])
			case l > 0 && l < 9 && pkt[0] == mysql.EOF_HEADER:
				eofs++
			}
		}
	}
	for i := range 200 { // warm: connections opened, statements prepared
		exec(i%benchRows + 1)
	}
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	key := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		exec(key%benchRows + 1)
		key += 7
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(syscall.TimevalToNsec(r1.Utime)-syscall.TimevalToNsec(r0.Utime)) +
		time.Duration(syscall.TimevalToNsec(r1.Stime)-syscall.TimevalToNsec(r0.Stime))
	sw := (r1.Nvcsw - r0.Nvcsw) + (r1.Nivcsw - r0.Nivcsw)
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(sw)/float64(b.N), "switches/op")
}
