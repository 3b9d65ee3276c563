package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/compose/composetest"
)

// TestLoginUnknownUserIsAccessDenied: an unknown user is refused exactly as
// a known user with a wrong password (1045, the same text but for the
// name), over TLS and over the RSA exchange: go-mysql answered it with
// 1449 "definer does not exist", which told clients which names exist.
func TestLoginUnknownUserIsAccessDenied(t *testing.T) {
	s := startProxy(t, nil)
	for _, params := range []string{"tls=skip-verify", "tls=false"} {
		var msgs []string
		for _, user := range []string{"app", "nobody"} {
			db, _ := sql.Open("mysql", user+":wrong@tcp("+s.Addr()+")/?"+params)
			err := db.Ping()
			db.Close()
			var me *gomysql.MySQLError
			if !errors.As(err, &me) || me.Number != mysql.ER_ACCESS_DENIED_ERROR || string(me.SQLState[:]) != "28000" {
				t.Fatalf("%s, user %s, wrong password: %v, want 1045 (28000)", params, user, err)
			}
			msgs = append(msgs, strings.Replace(me.Message, "'"+user+"'", "'U'", 1))
		}
		// The messages name the client's address (port included): compare
		// up to it.
		if cut := func(m string) string { return m[:strings.Index(m, "@")] }; cut(msgs[0]) != cut(msgs[1]) {
			t.Fatalf("%s: known user %q, unknown user %q", params, msgs[0], msgs[1])
		}
	}
}

// handshakeResponse builds a HandshakeResponse41 for user with plugin and
// auth data.
func handshakeResponse(user, plugin string, auth []byte) []byte {
	caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_LONG_PASSWORD)
	p := []byte{byte(caps), byte(caps >> 8), byte(caps >> 16), byte(caps >> 24), 0, 0, 0, 1, 45}
	p = append(p, make([]byte, 23)...)
	p = append(append(p, user...), 0)
	p = append(append(p, byte(len(auth))), auth...)
	return append(append(p, plugin...), 0)
}

// TestLoginBadRSAPasswordIsAccessDenied: caching_sha2_password's full
// authentication without TLS, with an RSA-encrypted password that does not
// decrypt, is refused with 1045 (go-mysql sent "crypto/rsa: decryption
// error" as an unknown error).
func TestLoginBadRSAPasswordIsAccessDenied(t *testing.T) {
	s := startProxy(t, nil)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, _, err := readPacket(c); err != nil { // the greeting
		t.Fatal(err)
	}
	scramble := make([]byte, 32)
	_, _ = rand.Read(scramble)
	step := func(seq byte, payload []byte) []byte {
		t.Helper()
		if err := writePackets(c, seq, payload); err != nil {
			t.Fatal(err)
		}
		_, p, err := readPacket(c)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := step(1, handshakeResponse("app", mysql.AUTH_CACHING_SHA2_PASSWORD, scramble)); !bytes.Equal(p, []byte{1, 4}) {
		t.Fatalf("want full authentication (01 04), got %x", p)
	}
	if p := step(3, []byte{2}); len(p) == 0 || p[0] != 1 || !bytes.Contains(p, []byte("PUBLIC KEY")) {
		t.Fatalf("want the public key, got %q", p)
	}
	garbage := make([]byte, 256)
	_, _ = rand.Read(garbage)
	p := step(5, garbage)
	a := classifyAnswer(6, p)
	if a.kind != "err" || a.code != mysql.ER_ACCESS_DENIED_ERROR || strings.Contains(a.msg, "crypto") {
		t.Fatalf("undecryptable password answered %v, want 1045", a)
	}
}

// limitedAccount creates a MySQL account on the primary without
// CONNECTION_ADMIN (so max_connections binds it) and returns it with a
// connection to the primary as the topology's own account.
func limitedAccount(t *testing.T) (Backend, *sql.DB) {
	t.Helper()
	composetest.Need(t, topo)
	p := topo.Primary()
	admin, err := sql.Open("mysql", p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	admin.SetMaxOpenConns(1)
	for _, q := range []string{
		"DROP USER IF EXISTS 'plimited'@'%'",
		"CREATE USER 'plimited'@'%' IDENTIFIED BY 'plimitedpw'",
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON *.* TO 'plimited'@'%'",
	} {
		mustExec(t, admin, q)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS 'plimited'@'%'") })
	return Backend{Addr: p.Addr(), User: "plimited", Password: "plimitedpw"}, admin
}

// TestLoginBackendFailureIsTheAnswer: when the session's primary connection
// fails at login (the server at max_connections, the proxy's account
// refused), the client gets the backend's own error code in place of the
// login's OK: the proxy used to send the OK, then an unrequested 2013 with
// sequence number 0. A server's refusal reaches the client as the server
// sent it, as a client connected direct reads it (go-sql-driver's
// TestConcurrent compares the text: the proxy's said "causallab proxy:
// ...", with SQLSTATE 08004 the server never sent).
func TestLoginBackendFailureIsTheAnswer(t *testing.T) {
	b, admin := limitedAccount(t)
	s := startProxy(t, func(c *Config) { c.Primary = b })
	var max int
	if err := admin.QueryRow("SELECT @@GLOBAL.max_connections").Scan(&max); err != nil {
		t.Fatal(err)
	}
	try := func(dsn string) *gomysql.MySQLError {
		t.Helper()
		db, _ := sql.Open("mysql", dsn)
		defer db.Close()
		err := db.Ping()
		var me *gomysql.MySQLError
		if !errors.As(err, &me) {
			t.Fatalf("login with the backend refusing: %v, want a server error", err)
		}
		return me
	}
	// Too many connections: the router's connections stay, new ones are
	// refused (the account has no CONNECTION_ADMIN).
	t.Cleanup(func() { _, _ = admin.Exec("SET GLOBAL max_connections = " + strconv.Itoa(max)) }) // also when a check fails first
	mustExec(t, admin, "SET GLOBAL max_connections = 1")
	me := try("app:apppw@tcp(" + s.Addr() + ")/?tls=skip-verify")
	direct := try(b.User + ":" + b.Password + "@tcp(" + b.Addr + ")/?tls=skip-verify")
	mustExec(t, admin, "SET GLOBAL max_connections = "+strconv.Itoa(max))
	if me.Number != mysql.ER_CON_COUNT_ERROR || me.Error() != direct.Error() {
		t.Fatalf("backend at max_connections: %q through the proxy, %q direct", me.Error(), direct.Error())
	}
	// The account refused.
	mustExec(t, admin, "ALTER USER 'plimited'@'%' IDENTIFIED BY 'changed'")
	me = try("app:apppw@tcp(" + s.Addr() + ")/?tls=skip-verify")
	if me.Number != mysql.ER_ACCESS_DENIED_ERROR || !strings.Contains(me.Message, "proxy's backend account") || strings.Contains(me.Message, "plimitedpw") {
		t.Fatalf("backend account refused: %d %s", me.Number, me.Message)
	}
	mustExec(t, admin, "ALTER USER 'plimited'@'%' IDENTIFIED BY 'plimitedpw'")
	db := openDB(t, s, "tls=skip-verify")
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatalf("after the backend recovered: %v", err)
	}
}

// flakyListener fails its first fails Accept calls as a process out of
// file descriptors does.
type flakyListener struct {
	net.Listener
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestServeSurvivesAcceptErrors: accept4 failing (too many open files)
// ended Serve and so the process; it must back off and keep accepting.
func TestServeSurvivesAcceptErrors(t *testing.T) {
	composetest.Need(t, topo)
	p := topo.Primary()
	s, err := New(Config{
		Listen: "127.0.0.1:0", Users: []User{{Name: "app", Password: "apppw"}},
		Primary: Backend{Addr: p.Addr(), User: p.User, Password: p.Password},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	s.ln = &flakyListener{Listener: s.ln, fails: 5}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	db := openDB(t, s, "tls=skip-verify&timeout=30s&readTimeout=30s")
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatalf("after accept errors: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestMaxConnections: connections past max_handshakes logins in progress
// (none stalled a second) and past max_connections logged-in clients are
// refused with ER_CON_COUNT_ERROR (1040) as MySQL refuses them; a client
// that does not finish its login is disconnected after
// handshake_timeout, which frees its slot.
func TestMaxConnections(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.MaxConnections, c.MaxHandshakes = 2, 3
		c.HandshakeTimeout = 500 * time.Millisecond
	})
	var half []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, _, err := readPacket(c); err != nil { // the greeting; then silence
			t.Fatal(err)
		}
		half = append(half, c)
	}
	refused := func(what, key string) {
		t.Helper()
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		seq, p, err := readPacket(c)
		if a := classifyAnswer(seq, p); err != nil || a.kind != "err" || a.code != mysql.ER_CON_COUNT_ERROR || seq != 0 {
			t.Fatalf("connection past %s: %v %v, want error 1040 with sequence 0", what, a, err)
		}
		// Nothing is negotiated before the greeting: no SQLSTATE marker (the
		// mysql client printed "#08004causallab proxy: ..." as the message).
		if msg := string(p[3:]); !strings.HasPrefix(msg, "causallab proxy: Too many connections") || !strings.Contains(msg, key) {
			t.Fatalf("1040 before the greeting carries %q, want the message right after the code, naming %s", p[3:], key)
		}
	}
	refused("max_handshakes logins in progress", "max_handshakes")
	// The silent ones are disconnected after the handshake timeout.
	for _, h := range half {
		_ = h.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadAll(h); err != nil {
			t.Fatalf("a client silent during its login was not disconnected: %v", err)
		}
	}
	for range 2 {
		rawLogin(t, s.Addr(), "app", "apppw", false)
	}
	refused("max_connections logged-in clients", "max_connections")
}

// TestOfferFlags: the greeting go-mysql writes gets CLIENT_MULTI_STATEMENTS
// and CLIENT_FOUND_ROWS added (clients keep only what the server offers);
// anything else passes unchanged.
func TestOfferFlags(t *testing.T) {
	caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SSL | mysql.CLIENT_SESSION_TRACK)
	p := []byte{10}
	p = append(append(p, "9.7.0-causallab"...), 0)
	p = append(p, 1, 0, 0, 0)                // connection id
	p = append(p, 1, 2, 3, 4, 5, 6, 7, 8, 0) // auth data, filler
	p = append(p, byte(caps), byte(caps>>8), 45, 2, 0, byte(caps>>16), byte(caps>>24), 21)
	p = append(p, make([]byte, 10)...)
	pkt := append([]byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), 0}, p...)
	out := offerFlags(pkt, greetingFlags)
	lo := 4 + 1 + len("9.7.0-causallab") + 1 + 4 + 9
	got := uint32(out[lo]) | uint32(out[lo+1])<<8 | uint32(out[lo+5])<<16 | uint32(out[lo+6])<<24
	if got != caps|greetingFlags {
		t.Fatalf("capabilities %#x, want %#x", got, caps|greetingFlags)
	}
	if !bytes.Equal(out[:lo], pkt[:lo]) || !bytes.Equal(out[lo+7:], pkt[lo+7:]) || out[lo+2] != 45 {
		t.Fatal("offerFlags changed more than the capability bytes")
	}
	if pkt[lo] != byte(caps) {
		t.Fatal("offerFlags changed its input")
	}
	for _, other := range [][]byte{
		{1, 0, 0, 0, 0xff},                        // an error packet
		{3, 0, 0, 1, 10, 'a', 'b'},                // not sequence 0
		append([]byte{5, 0, 0, 0, 10}, "abcd"...), // no NUL
	} {
		if o := offerFlags(other, greetingFlags); !bytes.Equal(o, other) {
			t.Errorf("offerFlags(% x) = % x, want it unchanged", other, o)
		}
	}
}
