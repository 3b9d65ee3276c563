package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Hostile-client tests: each drives the proxy with what a broken or
// malicious client sends (raw packets on loopback, bounded in count and
// time) and checks the proxy's answer, what it allocates, and that it still
// serves a well-behaved client afterwards.

// allocated runs f and returns the bytes the whole process allocated
// meanwhile (runtime.MemStats.TotalAlloc: every allocation counts, whether
// or not it was collected since).
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// served checks that a well-behaved client (already logged in) still gets
// an answer.
func served(t *testing.T, rc *rawConn) {
	t.Helper()
	if err := rc.ping(); err != nil {
		t.Fatalf("a well-behaved client is not served: %v", err)
	}
}

// TestHostileEmptyPacket: after login, a zero-length packet is answered
// like MySQL answers it (1047 Unknown command, the connection stays open):
// it once panicked go-mysql's command dispatch and ended the process.
func TestHostileEmptyPacket(t *testing.T) {
	s := startProxy(t, nil)
	p := topo.Primary()
	mysqlConn := rawLogin(t, p.Addr(), p.User, p.Password, false)
	mysqlConn.write(0, nil)
	want := mysqlConn.reply()
	for _, useTLS := range []bool{false, true} {
		rc := rawLogin(t, s.Addr(), "app", "apppw", useTLS)
		rc.write(0, nil)
		if a := rc.reply(); a.kind != want.kind || a.code != want.code || a.seq != want.seq {
			t.Fatalf("tls=%v: empty packet answered %v; MySQL answers %v", useTLS, a, want)
		}
		served(t, rc)
	}
}

// TestHostileClaimedLengths: logged-in clients each send a packet header
// claiming 16 MiB and then only 10 bytes. The proxy must allocate as bytes
// arrive, never on a claim (100 such connections once took the heap to
// 1.68 GB through the COM_STMT_EXECUTE rewrite). Allocation is measured
// once the proxy has read every claim and waited for the rest: each
// connection is then cut by client_read_timeout, counted (it was a 1 s
// sleep, which a loaded machine could outrun: a pass without the claims
// read).
func TestHostileClaimedLengths(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.ClientReadTimeout = time.Second })
	cut := s.m.clientErrors.WithLabelValues("read-timeout")
	good := rawLogin(t, s.Addr(), "app", "apppw", false)
	const n = 20
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = rawLogin(t, s.Addr(), "app", "apppw", i%2 == 0)
	}
	got := allocated(func() {
		for i, rc := range conns {
			cmd := byte(mysql.COM_STMT_EXECUTE)
			if i%2 == 1 {
				cmd = mysql.COM_QUERY
			}
			// 0xfffffe bytes claimed, 10 sent.
			if _, err := rc.nc.Write([]byte{0xfe, 0xff, 0xff, 0, cmd, 1, 0, 0, 0, 0, 1, 0, 0, 0}); err != nil {
				t.Fatal(err)
			}
		}
		// Every claim read, and the rest waited for until the read
		// timeout (a proxy allocating on the claim would have done so).
		for deadline := time.Now().Add(time.Minute); testutil.ToFloat64(cut) < n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%v of %d claiming connections cut by client_read_timeout after a minute", testutil.ToFloat64(cut), n)
			}
		}
		served(t, good)
	})
	if limit := uint64(n * 512 << 10); got > limit {
		t.Fatalf("%d connections claiming 16 MiB each and sending 10 bytes: %d MiB allocated (limit %d MiB)", n, got>>20, limit>>20)
	}
	t.Logf("%d claiming connections: %d KiB allocated by the whole process", n, got>>10)
}

// TestHostileOversizedMessage: a 64 MiB multi-packet COM_QUERY under a
// 1 MiB max_allowed_packet is refused with 1153 (as MySQL does: the
// sequence number follows the packet that crossed the limit, then the
// connection closes) once the running length passes the limit, without
// buffering it (one 400 MiB query once took RSS to 1.06 GB first).
func TestHostileOversizedMessage(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.MaxAllowedPacket = 1 << 20 })
	good := rawLogin(t, s.Addr(), "app", "apppw", false)
	rc := rawLogin(t, s.Addr(), "app", "apppw", false)
	q := make([]byte, 64<<20)
	q[0] = mysql.COM_QUERY
	copy(q[1:], "SELECT '")
	var a answer
	var wg sync.WaitGroup
	got := allocated(func() {
		wg.Go(func() { _ = writePackets(rc.nc, 0, q) })
		a = rc.reply()
		rc.nc.Close()
		wg.Wait()
	})
	if a.kind != "err" || a.code != mysql.ER_NET_PACKET_TOO_LARGE || a.seq != 1 {
		t.Fatalf("oversized query answered %v, want error 1153 with sequence 1", a)
	}
	if got > 16<<20 {
		t.Fatalf("a 64 MiB query under a 1 MiB limit: %d MiB allocated", got>>20)
	}
	t.Logf("64 MiB query refused: %v; %d KiB allocated by the whole process", a, got>>10)
	served(t, good)
}

// prepare prepares query with COM_STMT_PREPARE and returns the statement
// id and its parameter count.
func (r *rawConn) prepare(query string) (uint32, int) {
	r.t.Helper()
	r.write(0, append([]byte{mysql.COM_STMT_PREPARE}, query...))
	_, p, err := r.read()
	if err != nil || len(p) < 12 || p[0] != 0 {
		r.t.Fatalf("prepare %q: %x %v", query, p, err)
	}
	id := binary.LittleEndian.Uint32(p[1:5])
	cols := int(binary.LittleEndian.Uint16(p[5:7]))
	params := int(binary.LittleEndian.Uint16(p[7:9]))
	for _, n := range []int{params, cols} {
		if n == 0 {
			continue
		}
		for range n + 1 { // definitions and their EOF
			if _, _, err := r.read(); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	return id, params
}

// longData sends a COM_STMT_SEND_LONG_DATA chunk (no answer).
func (r *rawConn) longData(id uint32, param uint16, data []byte) {
	r.t.Helper()
	p := []byte{mysql.COM_STMT_SEND_LONG_DATA}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = binary.LittleEndian.AppendUint16(p, param)
	r.write(0, append(p, data...))
}

// executeBlob executes statement id whose one parameter, a BLOB, was sent
// as long data, and returns the first packet of the answer and the rest's
// packets until the final EOF when it is a result set.
func (r *rawConn) executeBlob(id uint32) (answer, [][]byte) {
	r.t.Helper()
	p := []byte{mysql.COM_STMT_EXECUTE}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = append(p, 0, 1, 0, 0, 0, 0, 1, mysql.MYSQL_TYPE_BLOB, 0)
	r.write(0, p)
	seq, first, err := r.read()
	if err != nil {
		return answer{kind: "closed"}, nil
	}
	a := classifyAnswer(seq, first)
	if a.kind != "data" {
		return a, nil
	}
	var rows [][]byte
	eofs := 0
	for eofs < 2 {
		_, p, err := r.read()
		if err != nil {
			r.t.Fatal(err)
		}
		if len(p) > 0 && p[0] == mysql.EOF_HEADER && len(p) < 9 {
			eofs++
			continue
		}
		if eofs == 1 {
			rows = append(rows, p)
		}
	}
	return a, rows
}

// binaryBigint is the value of a binary-protocol row of one BIGINT column
// (header 0x00, a one-byte NULL bitmap, 8 bytes), or -1.
func binaryBigint(row []byte) int64 {
	if len(row) != 10 || row[0] != 0 {
		return -1
	}
	return int64(binary.LittleEndian.Uint64(row[2:]))
}

// TestHostileLongDataPerParameter: long data for one parameter is bounded
// by max_allowed_packet as MySQL bounds it: the execution fails with
// MySQL's error (it was once accepted: 10 x 15 MiB under a 1 MiB limit).
func TestHostileLongDataPerParameter(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.MaxAllowedPacket = 1 << 20 })
	rc := rawLogin(t, s.Addr(), "app", "apppw", false)
	id, n := rc.prepare("SELECT LENGTH(?)")
	if n != 1 {
		t.Fatalf("%d parameters", n)
	}
	// Within the limit: executed with the value.
	rc.longData(id, 0, bytes.Repeat([]byte("a"), 300<<10))
	rc.longData(id, 0, bytes.Repeat([]byte("b"), 300<<10))
	if a, rows := rc.executeBlob(id); a.kind != "data" || len(rows) != 1 || binaryBigint(rows[0]) != 614400 {
		t.Fatalf("600 KiB of long data: %v %q", a, rows)
	}
	// Past it (three chunks of 400 KiB, each under the limit).
	for range 3 {
		rc.longData(id, 0, bytes.Repeat([]byte("c"), 400<<10))
	}
	a, rows := rc.executeBlob(id)
	if a.kind != "err" || a.code != mysql.ER_UNKNOWN_ERROR || !bytes.Contains([]byte(a.msg), []byte("max_allowed_packet")) {
		t.Fatalf("1.2 MiB of long data for one parameter under a 1 MiB max_allowed_packet: %v %q", a, rows)
	}
	// The statement is usable again (MySQL clears long data at execution).
	rc.longData(id, 0, []byte("xyz"))
	if a, rows := rc.executeBlob(id); a.kind != "data" || len(rows) != 1 {
		t.Fatalf("after the refusal: %v %q", a, rows)
	}
	served(t, rc)
}

// hugeToken is a causal token of n single-transaction intervals (n=60,000
// is about 730 KB).
func hugeToken(uuid string, n int) string {
	var b strings.Builder
	b.WriteString("g1.1." + uuid)
	for i := range n {
		b.WriteString(":" + strconv.Itoa(2*i+1))
	}
	return b.String()
}

// TestHostileHugeToken: a token longer than max_token_bytes is refused at
// once with an error naming the limit (a 730 KB token was accepted, and
// its wait ran for seconds on a replica and slowed other clients).
func TestHostileHugeToken(t *testing.T) {
	s := startProxy(t, nil)
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	tok := hugeToken("3e11fa47-71ca-11e1-9e33-c80aa9429562", 60000)
	for _, q := range []string{"/* causal_token:" + tok + " */ SELECT 1", "SET @causal_token = '" + tok + "'"} {
		_, err := db.Exec(q)
		var me *gomysql.MySQLError
		if !errors.As(err, &me) || !strings.Contains(me.Message, "max_token_bytes") {
			t.Fatalf("a %d-byte token: %v, want a refusal naming max_token_bytes", len(tok), err)
		}
	}
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

// TestRefusedReadNamesItsToken: a read refused for a token it carried in a
// comment names that token's epoch (it named the session's empty token's
// epoch 0).
func TestRefusedReadNamesItsToken(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.WaitBudget = 50 * time.Millisecond; c.FallbackPerSecond = 0.001 })
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	var uuid string
	if err := db.QueryRow("SELECT @@server_uuid").Scan(&uuid); err != nil {
		t.Fatal(err)
	}
	_, err := db.Query("/* causal_token:g1.1." + uuid + ":1-999999999 */ SELECT 1")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || !strings.Contains(me.Message, "cannot serve") || !strings.Contains(me.Message, "token epoch 1,") {
		t.Fatalf("a read whose comment token nobody holds: %v, want a refusal naming token epoch 1", err)
	}
}

// TestSetTokenExpressionRefused: SET @causal_token = CONCAT(...) or a
// subquery is refused (it returned OK and left the token unchanged).
func TestSetTokenExpressionRefused(t *testing.T) {
	s := startProxy(t, nil)
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	for _, q := range []string{"SET @causal_token = CONCAT('g1.1.', 'x')", "SET @causal_token = (SELECT 'g1.1.x')"} {
		_, err := db.Exec(q)
		var me *gomysql.MySQLError
		if !errors.As(err, &me) || !strings.Contains(me.Message, "one string literal") {
			t.Fatalf("%s: %v, want a refusal", q, err)
		}
	}
}
