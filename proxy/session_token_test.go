package proxy

import (
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
		q := "/* causal_token:g1.1." + memUUID + ":1-3 */ INSERT INTO t VALUES (1)"
		ch := h.start()
		h.write(packet(0, cmd(mysql.COM_QUERY, []byte(q))))
		h.expectCommand(h.prim, cmd(mysql.COM_QUERY, []byte(q)))
		h.answer(h.prim, 1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT))
		if err := h.wait(ch); err != nil {
			t.Fatal(err)
		}
		h.expect(cmdPacket{1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT)})
	})
}
