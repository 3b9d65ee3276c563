package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestCommandTokenAnnotationIsData: a causal_token annotation must be
// exactly one valid token, whatever the statement. A value pasted from
// untrusted text that closes the comment (`x */ DELETE ... #`) made a
// read into a DELETE that ran; now the statement is refused before any
// server sees it, as is a malformed token on a write or on a read pinned
// to the primary. A valid token on a write passes.
func TestCommandTokenAnnotationIsData(t *testing.T) {
	for _, q := range []string{
		"/* causal_token:x */ DELETE FROM t # */ SELECT * FROM t",
		"/* causal_token:not-a-token */ INSERT INTO t VALUES (1)",
		"/*+ ;min_gtid=zz */ UPDATE t SET a = 1",
		"/* causal_token:g1.1.nonsense */ SELECT a FROM t FOR UPDATE",
	} {
		t.Run(q, func(t *testing.T) {
			h := newCmdHarness(t)
			if err := h.do(packet(0, cmd(mysql.COM_QUERY, []byte(q)))); err != nil {
				t.Fatal(err)
			}
			if msg := h.expectErr(1, codeProxy); !strings.Contains(msg, "causal token") {
				t.Fatalf("refusal %q does not name the token", msg)
			}
			// No backend got anything: the ping's OK is the next packet
			// and both backends are still idle (a write to either would
			// block the harness's pipes).
			h.ping()
		})
	}
	t.Run("a valid token on a write", func(t *testing.T) {
		h := newCmdHarness(t)
		h.writeToPrimary("/* causal_token:g1.1." + memUUID + ":1-3 */ INSERT INTO t VALUES (1)")
	})
}

// tokenRow is SELECT @causal_token's value as the client got it (the
// fourth packet: count, column, EOF, row, EOF).
func (h *cmdHarness) tokenRow() []byte {
	h.t.Helper()
	if err := h.do(packet(0, cmd(mysql.COM_QUERY, []byte("SELECT @causal_token")))); err != nil {
		h.t.Fatal(err)
	}
	return h.recv(5)[3].payload
}

// TestCommandPreparedTokenParam: SET @causal_token = ? prepared
// (COM_STMT_PREPARE, answered by the proxy: one parameter, no columns, no
// backend) and executed with the token as a string parameter
// (COM_STMT_EXECUTE) sets the session's token, so a token from untrusted
// input travels as data. A NULL parameter clears it; a malformed token, a
// number, or the statement as a plain query are refused; no backend is
// touched.
func TestCommandPreparedTokenParam(t *testing.T) {
	h := newCmdHarness(t)
	const q = "SET @causal_token = ?"
	if err := h.do(packet(0, cmd(mysql.COM_STMT_PREPARE, []byte(q)))); err != nil {
		t.Fatal(err)
	}
	got := h.recv(3)
	if !bytes.Equal(got[0].payload, prepareOK(1, 0, 1)) || got[1].seq != 2 || got[2].payload[0] != mysql.EOF_HEADER {
		t.Fatalf("prepare answer %v, want statement 1 with one parameter", got)
	}
	tok := "g1.1." + memUUID + ":1-3"
	str := func(s string) []byte { return mysql.PutLengthEncodedString([]byte(s)) }
	exec := func(types, value []byte, nullBit byte) []byte {
		p := execPayload(1, 1, types != nil, types, value)
		p[10] = nullBit
		return packet(0, p)
	}
	if err := h.do(exec([]byte{mysql.MYSQL_TYPE_VAR_STRING, 0}, str(tok), 0)); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, proxyOK})
	if row := h.tokenRow(); !bytes.Equal(row, str(tok)) {
		t.Fatalf("token after the execution %q, want %q", row, tok)
	}
	// Re-executed without types (new-params-bound 0): the remembered
	// type is put back.
	tok2 := "g1.1." + memUUID + ":1-4"
	if err := h.do(exec(nil, str(tok2), 0)); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, proxyOK})
	if row := h.tokenRow(); !bytes.Equal(row, str(tok2)) {
		t.Fatalf("token after the second execution %q, want %q", row, tok2)
	}
	for _, c := range []struct {
		name string
		pkt  []byte
		code uint16
	}{
		{"not a token", exec([]byte{mysql.MYSQL_TYPE_VAR_STRING, 0}, str("x */ DELETE FROM t #"), 0), codeProxy},
		{"a number", exec([]byte{mysql.MYSQL_TYPE_LONGLONG, 0}, []byte{1, 0, 0, 0, 0, 0, 0, 0}, 0), mysql.ER_WRONG_ARGUMENTS},
		{"a plain query", packet(0, cmd(mysql.COM_QUERY, []byte(q))), mysql.ER_PARSE_ERROR},
	} {
		if err := h.do(c.pkt); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		h.expectErr(1, c.code)
	}
	if row := h.tokenRow(); !bytes.Equal(row, str(tok2)) {
		t.Fatalf("a refused execution changed the token: %q", row)
	}
	if err := h.do(exec([]byte{mysql.MYSQL_TYPE_VAR_STRING, 0}, nil, 1)); err != nil { // NULL
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, proxyOK})
	if row := h.tokenRow(); !bytes.Equal(row, []byte{0xfb}) {
		t.Fatalf("token after a NULL parameter %q, want NULL", row)
	}
	h.ping() // no backend was touched
}
