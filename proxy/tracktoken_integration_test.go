package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// trackedToken is the causal_token a go-mysql client found in the OK
// packet of q's answer (ok: the packet carried one).
func trackedToken(t *testing.T, c *client.Conn, q string) (tok string, ok bool, r *mysql.Result) {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if r.SessionTracking == nil {
		return "", false, r
	}
	tok, ok = r.SessionTracking.Variables[tokenVariable]
	return strings.Clone(tok), ok, r // go-mysql's strings alias its read buffer
}

// trackingClient is a go-mysql client of s that negotiates
// CLIENT_SESSION_TRACK (an optional capability there).
func trackingClient(s *Server) (*client.Conn, error) {
	return client.Connect(s.Addr(), "app", "apppw", "", func(c *client.Conn) error {
		return c.SetCapability(mysql.CLIENT_SESSION_TRACK)
	})
}

// TestTrackedToken: a client that reads session tracking (go-mysql's)
// finds the session's signed token in the OK packet of each statement
// after which it changed (track_token, the default), equal to SELECT
// @causal_token's, beside the GTIDs it asked for; another proxy of the
// fleet takes it, so a write's token needs no round trip. Nothing when
// the token did not change, nor with track_token off.
func TestTrackedToken(t *testing.T) {
	a, b := fleetProxy(t, nil), fleetProxy(t, nil)
	emptyTable(t, openDB(t, a, ""), "ptest", "fleettok", "id INT PRIMARY KEY")
	stopAppliers(t)
	c, err := trackingClient(a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	tok, ok, _ := trackedToken(t, c, "INSERT INTO ptest.fleettok VALUES (1)")
	if !ok || !strings.HasPrefix(tok, "s1.k2.") {
		t.Fatalf("the write's OK packet carried causal_token %q (%v); want a token signed with k2", tok, ok)
	}
	r, err := c.Execute("SELECT @causal_token")
	if err != nil {
		t.Fatal(err)
	}
	if sel, _ := r.GetString(0, 0); sel != tok {
		t.Fatalf("tracked token %q, SELECT @causal_token %q: they differ", tok, sel)
	}
	if again, ok, _ := trackedToken(t, c, "SET @causal_token = '"+tok+"'"); ok {
		t.Fatalf("an OK after which the token did not change carried causal_token %q", again)
	}

	// The GTIDs the client asked for stay, beside the token.
	if _, err := c.Execute("SET session_track_gtids = OWN_GTID"); err != nil {
		t.Fatal(err)
	}
	tok2, ok, r := trackedToken(t, c, "INSERT INTO ptest.fleettok VALUES (2)")
	if !ok || tok2 == tok || r.SessionTracking.GTID == "" {
		t.Fatalf("second write: causal_token %q (%v), GTID %q; want a new token and the write's GTID", tok2, ok, r.SessionTracking.GTID)
	}

	// Proxy B takes the tracked token: the write is read from a stopped
	// replica's fleet only with it.
	if readID(t, conn1(t, openDB(t, b, "")), 2) {
		t.Fatal("a session on proxy B without the token read row 2 from a stopped replica: the test cannot fail")
	}
	rb := conn1(t, openDB(t, b, ""))
	mustExec(t, rb, "SET @causal_token = '"+tok2+"'")
	if !readID(t, rb, 2) {
		t.Fatal("proxy B, with the token tracked in the write's OK packet: row 2 is missing")
	}

	off := fleetProxy(t, func(cfg *Config) { f := false; cfg.TrackToken = &f })
	c2, err := trackingClient(off)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, ok, _ := trackedToken(t, c2, "INSERT INTO ptest.fleettok VALUES (3)"); ok {
		t.Fatalf("track_token off: the write's OK carried causal_token %q", got)
	}
}
