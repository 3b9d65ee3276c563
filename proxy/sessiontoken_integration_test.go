package proxy

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/sessiontoken"
)

// testTokenKeys are a fleet's keys: k2 signs, k1 (the previous one)
// still verifies.
var testTokenKeys = []TokenKey{
	{ID: "k2", Secret: strings.Repeat("2", 32)},
	{ID: "k1", Secret: strings.Repeat("1", 32)},
}

// fleetProxy is a proxy of the test fleet: token_keys, token-ryw-mr, and
// no start token (a new session knows nothing of the proxy's writes, so
// only the carried token can show them).
func fleetProxy(t *testing.T, mod func(*Config)) *Server {
	return startProxy(t, func(c *Config) {
		c.TokenKeys, c.Policy, c.StartToken = testTokenKeys, "token-ryw-mr", StartTokenNone
		if mod != nil {
			mod(c)
		}
	})
}

// readID reads row id of ptest.fleettok through c: whether it was there.
func readID(t *testing.T, c *sql.Conn, id int) bool {
	t.Helper()
	var got int
	err := c.QueryRowContext(context.Background(), "SELECT id FROM ptest.fleettok WHERE id = ?", id).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestSignedTokenAcrossProxies: with token_keys, SELECT @causal_token is
// a signed session token of the session's writes and of what its reads
// were shown, and another proxy of the fleet takes it: a new session
// there reads the first session's write (read-your-writes) and what a
// session was shown (monotonic reads) from replicas whose appliers are
// stopped, where a session without the token reads neither.
func TestSignedTokenAcrossProxies(t *testing.T) {
	a, b := fleetProxy(t, nil), fleetProxy(t, nil)
	ctx := context.Background()
	dbA, dbB := openDB(t, a, ""), openDB(t, b, "")
	emptyTable(t, dbA, "ptest", "fleettok", "id INT PRIMARY KEY")
	stopAppliers(t)

	// Read-your-writes: a write on proxy A, read on proxy B.
	w := conn1(t, dbA)
	mustExec(t, w, "INSERT INTO ptest.fleettok VALUES (1)")
	var tok string
	if err := w.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil || !strings.HasPrefix(tok, "s1.k2.") {
		t.Fatalf("SELECT @causal_token after a write: %q, %v; want a token signed with k2", tok, err)
	}
	if readID(t, conn1(t, dbB), 1) {
		t.Fatal("a session on proxy B without the token read the row from a stopped replica: the test cannot fail")
	}
	rb := conn1(t, dbB)
	mustExec(t, rb, "SET @causal_token = '"+tok+"'")
	if !readID(t, rb, 1) {
		t.Fatal("proxy B, with the writer's signed token: the row is missing")
	}

	// Monotonic reads: what a session was shown on proxy A, and no
	// write of its own: with the writer's token its read of row 2 is
	// served by the primary (no replica has it), and clearing the token
	// keeps the watermark.
	mustExec(t, w, "INSERT INTO ptest.fleettok VALUES (2)")
	if err := w.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	r := conn1(t, dbA)
	mustExec(t, r, "SET @causal_token = '"+tok+"'")
	if !readID(t, r, 2) {
		t.Fatal("proxy A, with the writer's token: row 2 is missing")
	}
	mustExec(t, r, "SET @causal_token = ''")
	if err := r.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	kr, err := sessiontoken.NewKeyring(sessiontoken.Key{ID: "k2", Secret: []byte(testTokenKeys[0].Secret)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := kr.Parse(tok)
	if err != nil || !st.Writes.IsEmpty() || st.Seen.IsEmpty() {
		t.Fatalf("the reader's token %q: %+v, %v; want no writes and what it was shown", tok, st, err)
	}
	if readID(t, conn1(t, dbB), 2) {
		t.Fatal("a session on proxy B without the token read row 2 from a stopped replica")
	}
	rb2 := conn1(t, dbB)
	mustExec(t, rb2, "SET @causal_token = '"+tok+"'")
	if !readID(t, rb2, 2) {
		t.Fatal("proxy B, with the reader's signed token: a row the session was shown is missing (monotonic reads broken across proxies)")
	}
}

// TestSignedTokenRefused: a forged, altered, retired-key or future-epoch
// token is refused with its reason, and so is an unsigned one where
// token_keys are set (unless accept_unsigned_tokens); nothing of a
// refused token is taken.
func TestSignedTokenRefused(t *testing.T) {
	s := fleetProxy(t, nil)
	c := conn1(t, openDB(t, s, ""))
	set, _ := gtid.Parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-1000000")
	sign := func(id, secret string, tok sessiontoken.Token) string {
		kr, err := sessiontoken.NewKeyring(sessiontoken.Key{ID: id, Secret: []byte(secret)})
		if err != nil {
			t.Fatal(err)
		}
		return kr.Sign(tok)
	}
	good := sign("k1", testTokenKeys[1].Secret, sessiontoken.Token{Epoch: 1, Writes: set})
	for _, tc := range []struct{ name, token, reason string }{
		{"forged", sign("k2", strings.Repeat("x", 32), sessiontoken.Token{Epoch: 1, Writes: set}), "token-bad-signature"},
		{"altered", strings.Replace(good, "1-1000000", "1-1000001", 1), "token-bad-signature"},
		{"retired key", sign("k0", strings.Repeat("0", 32), sessiontoken.Token{Epoch: 1, Writes: set}), "token-unknown-key"},
		{"future epoch", sign("k2", testTokenKeys[0].Secret, sessiontoken.Token{Epoch: 2, Writes: set}), "token-future-epoch"},
		{"future seen epoch", sign("k2", testTokenKeys[0].Secret, sessiontoken.Token{SeenEpoch: 9, Seen: set}), "token-future-epoch"},
		{"malformed", "s1.k2.1", "token-malformed"},
		{"unsigned", "g1.1.3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "token-unsigned"},
		{"unsigned set", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "token-unsigned"},
		{"unsigned in a comment", "", "token-unsigned"},
	} {
		q := "SET @causal_token = '" + tc.token + "'"
		if tc.token == "" {
			q = "SELECT /* causal_token=g1.1.3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5 */ 1"
		}
		_, err := c.ExecContext(context.Background(), q)
		if err == nil || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: %v, want refused (%s)", tc.name, err, tc.reason)
		}
	}
	// Nothing was taken: the session has no token.
	var tok sql.NullString
	if err := c.QueryRowContext(context.Background(), "SELECT @causal_token").Scan(&tok); err != nil || tok.Valid {
		t.Fatalf("after refused tokens: @causal_token %v, %v; want NULL", tok, err)
	}
	// The previous key's token is taken (rotation).
	mustExec(t, c, "SET @causal_token = '"+good+"'")

	// accept_unsigned_tokens: the unsigned forms are taken beside the
	// signed one.
	open := fleetProxy(t, func(c *Config) { yes := true; c.AcceptUnsignedTokens = &yes })
	mustExec(t, conn1(t, openDB(t, open, "")), "SET @causal_token = 'g1.1.3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5'")
}

// TestMonotonicAfterPinnedRead: what a locking read or a transaction's
// read showed, a later routed read of the same session shows too (under
// token-ryw-mr): replicas whose appliers are stopped lack a row another
// session wrote, and the session read it on the primary first. Before,
// the routed read went to a replica and the row vanished.
func TestMonotonicAfterPinnedRead(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.Policy, c.StartToken = "token-ryw-mr", StartTokenNone })
	db := openDB(t, s, "")
	emptyTable(t, db, "ptest", "fleettok", "id INT PRIMARY KEY")
	stopAppliers(t)
	mustExec(t, conn1(t, db), "INSERT INTO ptest.fleettok VALUES (1)")
	if readID(t, conn1(t, db), 1) {
		t.Fatal("a new session read the row from a stopped replica: the test cannot fail")
	}
	for _, pinned := range []string{"SELECT id FROM ptest.fleettok WHERE id = 1 FOR SHARE", "BEGIN", "START TRANSACTION READ ONLY"} {
		c := conn1(t, db)
		if pinned == "BEGIN" || strings.HasPrefix(pinned, "START") {
			mustExec(t, c, pinned)
			if !readID(t, c, 1) {
				t.Fatalf("%s: the transaction's read lacks the row", pinned)
			}
			mustExec(t, c, "COMMIT")
		} else {
			var id int
			if err := c.QueryRowContext(context.Background(), pinned).Scan(&id); err != nil {
				t.Fatalf("the locking read: %v", err)
			}
		}
		if !readID(t, c, 1) {
			t.Fatalf("after %q showed the row, the session's next read lacks it", pinned)
		}
	}
}

// TestPrimaryReadWatermarkLost: when the primary's watermark cannot be
// read after a locking read reached the client, the session's
// monotonic-reads state is unknown: its connection closes after the
// answer, counted as watermark-read-failed; under token-ryw, which keeps
// no watermark, nothing is read and the session goes on.
func TestPrimaryReadWatermarkLost(t *testing.T) {
	for _, c := range []struct {
		policy string
		closed bool
	}{{"token-ryw-mr", true}, {"token-ryw", false}} {
		t.Run(c.policy, func(t *testing.T) {
			s := startProxy(t, func(cfg *Config) { cfg.Policy = c.policy })
			emptyTable(t, openDB(t, s, ""), "ptest", "wmlost", "id INT PRIMARY KEY")
			stopped, cancel := context.WithCancel(context.Background())
			cancel()
			s.topo.Load().primaryWM.mu.Lock()
			s.topo.Load().primaryWM.ctx = stopped // read answers errWatermarkReaderStopped
			s.topo.Load().primaryWM.mu.Unlock()
			conn := conn1(t, openDB(t, s, ""))
			var one int
			if err := conn.QueryRowContext(context.Background(), "SELECT 1 FROM ptest.wmlost FOR SHARE").Scan(&one); !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("the locking read of an empty table: %d, %v", one, err)
			}
			err := conn.PingContext(context.Background())
			if closed := err != nil; closed != c.closed {
				t.Fatalf("after the lost watermark: ping %v, want closed %v", err, c.closed)
			}
			failed := strings.Contains(metricText(t, s), `client_errors_total{kind="watermark-read-failed"} 1`)
			if failed != c.closed {
				t.Fatalf("watermark-read-failed counted %v, want %v", failed, c.closed)
			}
		})
	}
}
