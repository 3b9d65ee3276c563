package proxy

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Evaluate once, never replay an expression (docs/proxy-sessions.md, "When a
// session is pinned"): a session SET whose value is not a literal
// (Stmt.Eval) ran once on the primary; what it set is read back there
// (readbackQuery) and the session remembers a SET of literals
// (replaySet) to replay on its other connections. A replayed SET @u =
// UUID() would give every server another value, SET @id = f() run f's
// writes again, SET @saved = @@x carry a later moment's value.

// readbackQuery is the SELECT that reads back what a SET of targets set:
// per user variable its value (whose column type says integer, decimal,
// double, string or NULL), HEX, CHARSET and COLLATION (a string's bytes
// as the variable holds them, whatever character_set_results); per
// system variable its session value.
func readbackQuery(targets []SetTarget) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, t := range targets {
		if i > 0 {
			b.WriteString(", ")
		}
		if t.User {
			fmt.Fprintf(&b, "%s, HEX(%s), CHARSET(%s), COLLATION(%s)", t.Name, t.Name, t.Name, t.Name)
			continue
		}
		b.WriteString("@@SESSION.")
		b.WriteString(t.Name)
	}
	return b.String()
}

// errSetReadback: the read-back answer is not one a literal can be made
// of (wrapped with what).
var errSetReadback = errors.New("proxy: SET read-back")

// replaySet builds the literal SET from the read-back's answer: its
// columns' types and one text row.
func replaySet(targets []SetTarget, fields []*mysql.Field, row []byte) (string, error) {
	vals, nulls, err := readbackRow(row, len(fields))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("SET ")
	col := 0
	for i, t := range targets {
		if i > 0 {
			b.WriteString(", ")
		}
		var lit string
		if t.User {
			if col+4 > len(fields) {
				return "", fmt.Errorf("%w: %d columns", errSetReadback, len(fields))
			}
			lit, err = userLiteral(fields[col].Type, vals[col:col+4], nulls[col])
			col += 4
			b.WriteString(t.Name)
		} else {
			if col+1 > len(fields) {
				return "", fmt.Errorf("%w: %d columns", errSetReadback, len(fields))
			}
			lit, err = sysLiteral(fields[col].Type, vals[col], nulls[col])
			col++
			b.WriteString("@@SESSION.")
			b.WriteString(t.Name)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", t.Name, err)
		}
		b.WriteString(" = ")
		b.WriteString(lit)
	}
	if col != len(fields) {
		return "", fmt.Errorf("%w: %d columns for %d", errSetReadback, len(fields), col)
	}
	return b.String(), nil
}

// readbackRow splits a text-protocol row of n columns (length-encoded
// strings, 0xfb for NULL).
func readbackRow(row []byte, n int) (vals []string, nulls []bool, err error) {
	vals, nulls = make([]string, n), make([]bool, n)
	pos := 0
	for i := range n {
		if pos >= len(row) {
			return nil, nil, fmt.Errorf("%w: row of %d bytes ends before column %d", errSetReadback, len(row), i)
		}
		if row[pos] == 0xfb {
			nulls[i] = true
			pos++
			continue
		}
		n, m := lenencInt(row[pos:])
		if m == 0 || uint64(len(row)-pos-m) < n {
			return nil, nil, fmt.Errorf("%w: column %d: bad length", errSetReadback, i)
		}
		pos += m
		vals[i] = string(row[pos : pos+int(n)])
		pos += int(n)
	}
	if pos != len(row) {
		return nil, nil, fmt.Errorf("%w: %d bytes after %d columns", errSetReadback, len(row)-pos, n)
	}
	return vals, nulls, nil
}

// userLiteral is the literal a user variable is set to again: v is its
// value, HEX, CHARSET and COLLATION; typ the value column's type.
func userLiteral(typ uint8, v []string, null bool) (string, error) {
	if null || typ == mysql.MYSQL_TYPE_NULL {
		return "NULL", nil
	}
	switch typ {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG:
		return numberLiteral(v[0], "-0123456789")
	case mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_DECIMAL:
		return numberLiteral(v[0], "-.0123456789")
	case mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_FLOAT:
		lit, err := numberLiteral(v[0], "-+.0123456789eE")
		if err == nil && !strings.ContainsAny(lit, "eE") {
			lit += "E0" // a double, not a decimal
		}
		return lit, err
	case mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_VARCHAR,
		mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB,
		mysql.MYSQL_TYPE_LONG_BLOB:
		hx, cs, coll := v[1], v[2], v[3]
		if !hexDigits(hx) || !identWord(cs) || !identWord(coll) {
			return "", fmt.Errorf("%w: string %q in %q/%q", errSetReadback, hx, cs, coll)
		}
		if coll == "binary" {
			return "X'" + hx + "'", nil
		}
		return "_" + cs + " X'" + hx + "' COLLATE " + coll, nil
	}
	return "", fmt.Errorf("%w: column type %d", errSetReadback, typ)
}

// sysLiteral is the literal a session system variable is set to again.
func sysLiteral(typ uint8, v string, null bool) (string, error) {
	if null || typ == mysql.MYSQL_TYPE_NULL {
		return "NULL", nil
	}
	switch typ {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG,
		mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_DECIMAL,
		mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_FLOAT:
		return numberLiteral(v, "-+.0123456789eE")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c > '~' || c == '\\' || c == '\'' {
			// Outside plain text (or a quote, or a backslash, which
			// NO_BACKSLASH_ESCAPES would read otherwise): its bytes.
			return "X'" + strings.ToUpper(hex.EncodeToString([]byte(v))) + "'", nil
		}
	}
	// Its character set named: the connection's may be utf16 or utf32
	// (collation_connection), which would read the bytes otherwise.
	return "_utf8mb4'" + v + "'", nil
}

// numberLiteral checks that v is made of allowed's bytes only (the
// server's text of a number).
func numberLiteral(v, allowed string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("%w: empty number", errSetReadback)
	}
	for i := 0; i < len(v); i++ {
		if strings.IndexByte(allowed, v[i]) < 0 {
			return "", fmt.Errorf("%w: number %q", errSetReadback, v)
		}
	}
	return v, nil
}

func hexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'F' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return len(s)%2 == 0
}

// identWord: s is a character set or collation name.
func identWord(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
			return false
		}
	}
	return true
}

// evalSet reads back on the primary what a session SET of targets
// (already run there) set and returns the literal SET to replay.
func (s *session) evalSet(targets []SetTarget) (string, error) {
	if s.primary == nil || s.primary.broken {
		return "", fmt.Errorf("%w: the primary connection that ran the SET is gone", errSetReadback)
	}
	r, err := s.primary.exec(s.ctx, readbackQuery(targets))
	if err != nil {
		return "", err
	}
	if r.Resultset == nil || len(r.RowDatas) != 1 {
		return "", fmt.Errorf("%w: not one row", errSetReadback)
	}
	return replaySet(targets, r.Fields, r.RowDatas[0])
}

// rememberSet replays session statement query (run on the primary, its
// answer with warnings warnings) everywhere: as it is when its values
// are literals, else the SET of literals evalSet reads back. A SET that
// left warnings, or one traced (optimizer_trace, profiling), is read back
// before the next statement that does not ask about them (evalPending:
// the read-back would clear the warnings and replace the trace).
func (s *session) rememberSet(query string, st Stmt, warnings uint16) {
	if st.Eval == nil {
		s.replayEverywhere(query)
		return
	}
	if warnings != 0 || s.state.traces {
		s.state.pendingEval = st.Eval
		s.state.held |= HoldSetPending
		return
	}
	s.evalReplay(st.Eval)
}

// evalPending reads back the SET left pending (HoldSetPending), before
// a statement that does not ask about the SET's warnings.
func (s *session) evalPending() {
	targets := s.state.pendingEval
	s.state.pendingEval = nil
	s.state.held &^= HoldSetPending
	s.evalReplay(targets)
}

// evalReplay reads back what a SET of targets set and replays it. When
// the read-back fails the session's reads stay on the primary, which
// alone has the values (HoldSessionState); counted in
// session_state_total{event}.
func (s *session) evalReplay(targets []SetTarget) {
	lit, err := s.evalSet(targets)
	if err != nil {
		s.srv.m.sessionState.WithLabelValues("set-not-evaluated").Inc()
		s.srv.log.Warn("a SET's values could not be read back: the session's reads stay on the primary", "session", s.id, "err", err.Error())
		s.state.held |= HoldSessionState
		for i, r := range s.replicas {
			r.close()
			s.replicas[i] = nil
		}
		return
	}
	s.srv.m.sessionState.WithLabelValues("set-evaluated").Inc()
	s.replayEverywhere(lit)
}

// lenencInt reads a length-encoded integer at the start of b: its value
// and size (0 when b is too short or starts with no length).
func lenencInt(b []byte) (v uint64, size int) {
	if len(b) == 0 {
		return 0, 0
	}
	switch c := b[0]; {
	case c < 0xfb:
		return uint64(c), 1
	case c == 0xfc:
		size = 3
	case c == 0xfd:
		size = 4
	case c == 0xfe:
		size = 9
	default:
		return 0, 0
	}
	if len(b) < size {
		return 0, 0
	}
	for i := size - 1; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, size
}
