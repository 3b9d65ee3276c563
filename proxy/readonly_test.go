package proxy

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestReadOnlyRefusal: only a server's read-only refusals are held back
// for the primary (1290 names other options too: --secure-file-priv).
func TestReadOnlyRefusal(t *testing.T) {
	errPkt := func(code uint16, msg string) []byte {
		return append([]byte{0, 0, 0, 1, mysql.ERR_HEADER, byte(code), byte(code >> 8), '#', 'H', 'Y', '0', '0', '0'}, msg...)
	}
	for _, c := range []struct {
		code uint16
		msg  string
		want bool
	}{
		{mysql.ER_OPTION_PREVENTS_STATEMENT, "The MySQL server is running with the --super-read-only option so it cannot execute this statement", true},
		{mysql.ER_OPTION_PREVENTS_STATEMENT, "The MySQL server is running with the --read-only option so it cannot execute this statement", true},
		{mysql.ER_OPTION_PREVENTS_STATEMENT, "The MySQL server is running with the --secure-file-priv option so it cannot execute this statement", false},
		{mysql.ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, "Cannot execute statement in a READ ONLY transaction.", true},
		{mysql.ER_NO_SUCH_TABLE, "Table 'a.b' doesn't exist", false},
	} {
		if got := readOnlyRefusal(c.code, errPkt(c.code, c.msg)); got != c.want {
			t.Errorf("%d %q: %v, want %v", c.code, c.msg, got, c.want)
		}
	}
}
