package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/internal/sqllex"
)

func TestWithConnectionID(t *testing.T) {
	const c = "CAST(42 AS UNSIGNED)"
	for _, tc := range []struct{ in, want string }{
		{"SELECT CONNECTION_ID()", "SELECT " + c + " AS `CONNECTION_ID()`"},
		{"select connection_id()", "select " + c + " AS `connection_id()`"},
		{"SELECT CONNECTION_ID(), 1", "SELECT " + c + " AS `CONNECTION_ID()`, 1"},
		{"SELECT 1, CONNECTION_ID() FROM t", "SELECT 1, " + c + " AS `CONNECTION_ID()` FROM t"},
		{"SELECT CONNECTION_ID() AS id", "SELECT " + c + " AS id"},
		{"SELECT CONNECTION_ID() id", "SELECT " + c + " id"},
		{"SELECT 1 + CONNECTION_ID()", "SELECT 1 + " + c},
		{"SELECT CONNECTION_ID() + 1", "SELECT " + c + " + 1"},
		{"SELECT * FROM t WHERE id = CONNECTION_ID ( )", "SELECT * FROM t WHERE id = " + c},
		{"SELECT * FROM t ORDER BY a, CONNECTION_ID()", "SELECT * FROM t ORDER BY a, " + c},
		{"SELECT (SELECT CONNECTION_ID())", "SELECT (SELECT " + c + ")"},
		{"SELECT x IN (1, CONNECTION_ID(), 3)", "SELECT x IN (1, " + c + ", 3)"},
		{"INSERT INTO t VALUES (CONNECTION_ID())", "INSERT INTO t VALUES (" + c + ")"},
		{"SET @c = CONNECTION_ID()", "SET @c = " + c},
		{"KILL CONNECTION_ID()", "KILL " + c},
		{"SELECT /*!80000 CONNECTION_ID() */", "SELECT /*!80000 " + c + " AS `CONNECTION_ID()` */"},
		// Untouched: strings, comments, quoted and qualified names,
		// variables, no call.
		{"SELECT 'CONNECTION_ID()'", ""},
		{`SELECT "x CONNECTION_ID() y"`, ""},
		{"SELECT 1 /* CONNECTION_ID() */", ""},
		{"SELECT 1 -- CONNECTION_ID()\n", ""},
		// Kept text, not run: a body stored for later, a plan's echo.
		{"CREATE VIEW v AS SELECT CONNECTION_ID()", ""},
		{"create trigger tr before insert on t for each row set new.c = connection_id()", ""},
		{"ALTER VIEW v AS SELECT CONNECTION_ID() AS c", ""},
		{"EXPLAIN SELECT * FROM t WHERE id = CONNECTION_ID()", ""},
		{"SELECT 1 # CONNECTION_ID()", ""},
		{"SELECT `CONNECTION_ID`()", ""},
		{"SELECT db.CONNECTION_ID()", ""},
		{"SELECT @CONNECTION_ID", ""},
		{"SELECT CONNECTION_ID FROM t", ""},
		{"SELECT CONNECTION_ID(1)", ""},
		{"CREATE FUNCTION CONNECTION_ID() RETURNS INT RETURN 1", ""},
		{"SELECT 1", ""},
	} {
		want := tc.want
		if want == "" {
			want = tc.in
		}
		if got, _ := withConnectionID(tc.in, 42); got != want {
			t.Errorf("withConnectionID(%q)\n got %q\nwant %q", tc.in, got, want)
		}
	}
}

// FuzzWithConnectionID: the rewrite never panics, changes nothing in a
// statement without a call, and leaves the same tokens apart from the
// calls: strings, identifiers and comments are the same text.
func FuzzWithConnectionID(f *testing.F) {
	for _, s := range []string{
		"SELECT CONNECTION_ID()", "select connection_id(), 'CONNECTION_ID()' /* CONNECTION_ID() */",
		"SELECT `CONNECTION_ID`(), db.CONNECTION_ID(), @CONNECTION_ID", "SELECT CONNECTION_ID(", "SELECT CONNECTION_ID(()",
		"KILL QUERY CONNECTION_ID()", "SELECT /*!80000 CONNECTION_ID() */", "SELECT 'unterminated CONNECTION_ID()",
		"SELECT CONNECTION_ID() -- x\n, CONNECTION_ID()#y", "SELECT a FROM t WHERE b = CONNECTION_ID() ORDER BY CONNECTION_ID()",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		out, _ := withConnectionID(q, 7)
		if !containsFold(q, "CONNECTION_ID") && out != q {
			t.Fatalf("%q rewritten to %q without a call", q, out)
		}
		// Every string literal, quoted identifier and comment of q is
		// in out unchanged.
		var keep []string
		l := sqllex.Lexer{S: q, Comment: func(c sqllex.Comment) { keep = append(keep, q[c.Start:c.BodyStart]+c.Body) }}
		for tk := l.Next(); tk.Kind != sqllex.EOF; tk = l.Next() {
			if tk.Kind == sqllex.String || tk.Kind == sqllex.Ident {
				keep = append(keep, tk.Text)
			}
		}
		for _, k := range keep {
			if !strings.Contains(out, k) {
				t.Fatalf("%q rewritten to %q loses %q", q, out, k)
			}
		}
		if again, _ := withConnectionID(out, 7); !strings.Contains(q, "CAST(") && again != out {
			t.Fatalf("rewriting %q twice changed it again: %q", out, again)
		}
	})
}

func TestClassifyKillAndProcessList(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want Stmt
	}{
		{"KILL 12", Stmt{Kind: KindKill, KillID: 12}},
		{"kill query 12;", Stmt{Kind: KindKill, KillID: 12, KillQuery: true}},
		{"KILL CONNECTION 18446744073709551615", Stmt{Kind: KindKill, KillID: 1<<64 - 1}},
		{"KILL QUERY CAST(9 AS UNSIGNED)", Stmt{Kind: KindKill, KillID: 9, KillQuery: true}},
		{"/*!50000 KILL 3 */", Stmt{Kind: KindKill, KillID: 3}},
		{"KILL 18446744073709551616", Stmt{Kind: KindKill, KillBad: true}},
		{"KILL 1+1", Stmt{Kind: KindKill, KillBad: true}},
		{"KILL @id", Stmt{Kind: KindKill, KillVar: "@id"}},
		{"KILL QUERY @aux;", Stmt{Kind: KindKill, KillVar: "@aux", KillQuery: true}},
		{"KILL @@pseudo_thread_id", Stmt{Kind: KindKill, KillBad: true}},
		{"KILL @id; DROP TABLE t", Stmt{Kind: KindKill, KillBad: true}},
		{"KILL 0x0c", Stmt{Kind: KindKill, KillBad: true}},
		{"KILL QUERY", Stmt{Kind: KindKill, KillQuery: true, KillBad: true}},
		{"KILL 1; DROP TABLE t", Stmt{Kind: KindKill, KillBad: true}},
		{"KILL CAST(1 AS SIGNED)", Stmt{Kind: KindKill, KillBad: true}},
		{"SHOW PROCESSLIST", Stmt{Kind: KindProcessList}},
		{"show full processlist;", Stmt{Kind: KindProcessList, Full: true}},
		{"SHOW PROCESSLIST LIKE 'x'", primary(ReasonShow)},
		{"SHOW FULL TABLES", primary(ReasonShow)},
	} {
		got, err := Classify(tc.q)
		if err != nil {
			t.Fatalf("%q: %v", tc.q, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Classify(%q) = %+v, want %+v", tc.q, got, tc.want)
		}
	}
	for q, want := range map[string]bool{
		"SELECT 1; KILL 5": true, "DO 1 ;\n kill query 5": true, "SELECT 'a;KILL 5'": false,
		"SELECT 1; SELECT 'KILL'": false, "KILL 5": false, "SELECT 1 /* ; KILL 5 */": false,
	} {
		if got := killAfterFirst(q); got != want {
			t.Errorf("killAfterFirst(%q) = %v, want %v", q, got, want)
		}
	}
}

func TestGreetingWithID(t *testing.T) {
	payload := append([]byte{10}, "8.4.0-causallab\x00"...)
	payload = append(payload, 0x11, 0x27, 0, 0) // 10001
	payload = append(payload, bytes.Repeat([]byte{1}, 30)...)
	pkt := append([]byte{byte(len(payload)), 0, 0, 0}, payload...)
	in := bytes.Clone(pkt)
	out := greetingWithID(pkt, 0x01020304)
	if !bytes.Equal(pkt, in) {
		t.Fatal("greetingWithID changed its input")
	}
	at := 4 + 1 + len("8.4.0-causallab") + 1
	if got := binary.LittleEndian.Uint32(out[at:]); got != 0x01020304 {
		t.Fatalf("thread id %#x, want 0x01020304", got)
	}
	if !bytes.Equal(out[:at], pkt[:at]) || !bytes.Equal(out[at+4:], pkt[at+4:]) {
		t.Fatal("greetingWithID changed more than the thread id")
	}
	for _, other := range [][]byte{nil, {1, 0, 0, 0, 9}, pkt[:10], {3, 0, 0, 0, 10, 'x', 'y'}} {
		if o := greetingWithID(other, 5); !bytes.Equal(o, other) {
			t.Errorf("greetingWithID(% x) = % x, want it unchanged", other, o)
		}
	}
}

// TestAllocID: ids count from 1, skip ids in use after the counter
// wraps, and are striped across workers.
func TestAllocID(t *testing.T) {
	s := &Server{byID: map[uint32]*session{}}
	a, b := &session{}, &session{}
	if id := s.allocID(a); id != 1 {
		t.Fatalf("first id %d, want 1", id)
	}
	if id := s.allocID(b); id != 2 {
		t.Fatalf("second id %d, want 2", id)
	}
	s.dropID(2)
	s.nextID = 1<<32 - 1
	if id := s.allocID(b); id != 2 {
		t.Fatalf("after the wrap: id %d, want 2 (1 is in use)", id)
	}
	w := &Server{byID: map[uint32]*session{}, cfg: Config{Workers: 4, WorkerIndex: 2}}
	for _, want := range []uint32{3, 7, 11} {
		if id := w.allocID(a); id != want {
			t.Fatalf("worker 2 of 4: id %d, want %d", id, want)
		}
	}
	w.nextID = 1<<32 - 2 // 3 + k*4 never lands on 2^32-1: wraps to 3, in use
	if id := w.allocID(a); id != 15 {
		t.Fatalf("worker after the wrap: id %d, want 15 (3, 7, 11 in use)", id)
	}
}

func TestTruncateChars(t *testing.T) {
	long := strings.Repeat("é", 150)
	if got := truncateChars(long, 100); got != strings.Repeat("é", 100) {
		t.Fatalf("UTF-8 cut at %d bytes", len(got))
	}
	if got := truncateChars("abc", 100); got != "abc" {
		t.Fatal(got)
	}
	if got := truncateChars(string([]byte{0xff, 0xfe, 0xfd}), 2); len(got) != 2 {
		t.Fatal(len(got))
	}
}

// TestKillBetweenCalls: a KILL QUERY that reaches a command while no
// backend call is in flight makes its next call fail with 1317 without
// being sent; the command's end clears it, and an idle session is not
// touched.
func TestKillBetweenCalls(t *testing.T) {
	srv := &Server{m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{ConnectTimeout: time.Second}}
	killer := &session{srv: srv, ctx: context.Background()}
	r := newRunState()
	ctx := context.WithValue(context.Background(), runKey{}, r)
	bc := &backendConn{b: &Backend{Name: "n"}}
	if killer.killRunning(r, false) {
		t.Fatal("a kill of an idle session reached something")
	}
	r.begin(mysql.COM_QUERY, "SELECT 1", "")
	if !killer.killRunning(r, false) {
		t.Fatal("a kill of a running command reached nothing")
	}
	if _, err := bc.bind(ctx); myErrCode(err) != mysql.ER_QUERY_INTERRUPTED {
		t.Fatalf("a call after the kill: %v, want 1317", err)
	}
	if !r.finish("") {
		t.Fatal("the command's end did not report the kill")
	}
	stop, err := bc.bind(ctx)
	if err != nil {
		t.Fatalf("the next command's call: %v", err)
	}
	bc.unbind(stop)
}

// TestKillWaitsInLeave: a session does not leave a call while a kill of
// it is in flight (its connection cannot go back to a pool and run
// another's statement first); a kill that fails (its node unreachable)
// is counted and lets it go.
func TestKillWaitsInLeave(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the kill's dial fails
	srv := &Server{m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{ConnectTimeout: time.Second}}
	killer := &session{srv: srv, ctx: context.Background()}
	r := newRunState()
	b := &Backend{Name: "gone", Addr: addr}
	bc := &backendConn{b: b}
	r.begin(mysql.COM_QUERY, "SELECT SLEEP(1)", "")
	r.mu.Lock()
	r.bc, r.thread, r.node = bc, 77, b
	r.killing++ // a kill took the thread id
	r.mu.Unlock()
	left := make(chan struct{})
	go func() { r.leave(bc); close(left) }()
	select {
	case <-left:
		t.Fatal("left the call while a kill of it was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	r.mu.Lock()
	r.killing--
	r.bc = bc // the same call, still in flight: the real kill now
	r.cond.Broadcast()
	r.mu.Unlock()
	if !killer.killRunning(r, false) {
		t.Fatal("the kill reached nothing")
	}
	select {
	case <-left:
	case <-time.After(10 * time.Second):
		t.Fatal("still in the call after the kills ended")
	}
	if got := testutil.ToFloat64(srv.m.backendErrors.WithLabelValues("gone", "kill")); got != 1 {
		t.Fatalf("failed kills counted %v, want 1", got)
	}
}

// TestGrantsGlobal: what one SHOW GRANTS line grants on *.*, as MySQL
// writes them.
func TestGrantsGlobal(t *testing.T) {
	for _, tc := range []struct {
		grant, priv string
		want        bool
	}{
		{"GRANT PROCESS ON *.* TO `ru`@`%`", "PROCESS", true},
		{"GRANT SELECT, PROCESS, SUPER ON *.* TO `a`@`%` WITH GRANT OPTION", "SUPER", true},
		{"GRANT APPLICATION_PASSWORD_ADMIN,CONNECTION_ADMIN,XA_RECOVER_ADMIN ON *.* TO `root`@`localhost`", "CONNECTION_ADMIN", true},
		{"GRANT ALL PRIVILEGES ON *.* TO `x`@`%`", "PROCESS", true},
		{"GRANT USAGE ON *.* TO `ru`@`%`", "PROCESS", false},
		{"GRANT PROCESSLIST_ADMIN ON *.* TO `ru`@`%`", "PROCESS", false},
		{"GRANT ALL PRIVILEGES ON `db`.* TO `x`@`%`", "PROCESS", false},
		{"GRANT `r_proc`@`%` TO `ru`@`%`", "PROCESS", false},
		{"GRANT PROXY ON ``@`` TO `root`@`localhost` WITH GRANT OPTION", "PROXY", false},
		{"REVOKE PROCESS ON *.* FROM `ru`@`%`", "PROCESS", false},
		{"", "PROCESS", false},
	} {
		if got := grantsGlobal(tc.grant, tc.priv); got != tc.want {
			t.Errorf("grantsGlobal(%q, %s) = %v, want %v", tc.grant, tc.priv, got, tc.want)
		}
	}
}

// FuzzGrantsGlobal: no line panics it, and a global grant built of any
// privilege names is found to grant each of them.
func FuzzGrantsGlobal(f *testing.F) {
	f.Add("GRANT PROCESS ON *.* TO `ru`@`%`", "PROCESS", "SELECT")
	f.Add("GRANT `r`@`%` TO `u`@`%`", "CONNECTION_ADMIN", "SUPER")
	f.Add("GRANT  ON *.* TO ", "", " ")
	f.Fuzz(func(t *testing.T, line, a, b string) {
		grantsGlobal(line, a) // any line
		a, b = strings.TrimSpace(a), strings.TrimSpace(b)
		if a == "" || b == "" || strings.ContainsAny(a+b, ",") || strings.Contains(a+b, " ON *.* TO ") || strings.HasSuffix(a+b, " ON *.*") {
			return
		}
		g := "GRANT " + a + ", " + b + " ON *.* TO `u`@`%`"
		if !grantsGlobal(g, a) || !grantsGlobal(g, b) {
			t.Fatalf("%q: %s %v, %s %v", g, a, grantsGlobal(g, a), b, grantsGlobal(g, b))
		}
	})
}

// FuzzPeerRequest: whatever another process writes on a worker's peer
// socket, decoding and answering it never panics, and a request for a
// session the worker does not hold is an unknown thread or no rows.
func FuzzPeerRequest(f *testing.F) {
	f.Add([]byte(`{"op":"kill","id":3,"query":true,"user":"app"}`))
	f.Add([]byte(`{"op":"list","user":"app","admin":true,"full":true}`))
	f.Add([]byte(`{"op":"kill","id":0,"user":""}`))
	f.Add([]byte(`{"op":7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req peerRequest
		if json.Unmarshal(b, &req) != nil {
			return
		}
		s := &Server{byID: map[uint32]*session{}, cfg: Config{Workers: 2, WorkerIndex: 1}}
		rep, err := s.answerPeer(req)
		switch {
		case err != nil && (req.Op == peerKill || req.Op == peerList):
			t.Fatalf("%+v: %v", req, err)
		case req.Op == peerKill && rep.Outcome != killUnknown:
			t.Fatalf("%+v: outcome %q with no session", req, rep.Outcome)
		case len(rep.Rows) != 0:
			t.Fatalf("%+v: rows %v with no session", req, rep.Rows)
		}
	})
}
