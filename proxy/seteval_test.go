package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lenencRow builds a text-protocol row (nil: NULL).
func lenencRow(vals ...*string) []byte {
	var b []byte
	for _, v := range vals {
		if v == nil {
			b = append(b, 0xfb)
			continue
		}
		b = append(b, mysql.PutLengthEncodedString([]byte(*v))...)
	}
	return b
}

func sp(s string) *string { return &s }

func fieldsOf(types ...uint8) []*mysql.Field {
	fs := make([]*mysql.Field, len(types))
	for i, t := range types {
		fs[i] = &mysql.Field{Type: t}
	}
	return fs
}

// TestReplaySet: the literal SET made of a read-back keeps each value's
// type (integer, decimal, double, a string's bytes, character set and
// collation, binary, NULL); a system variable's value is a number or a
// quoted string (its bytes when it is not plain text); an answer of
// another shape is refused, never replayed.
func TestReplaySet(t *testing.T) {
	str := mysql.MYSQL_TYPE_VAR_STRING
	u := func(n string) SetTarget { return SetTarget{User: true, Name: n} }
	for _, c := range []struct {
		targets []SetTarget
		fields  []*mysql.Field
		row     []byte
		want    string
	}{
		{[]SetTarget{u("@a")}, fieldsOf(mysql.MYSQL_TYPE_LONGLONG, str, str, str),
			lenencRow(sp("-42"), sp("FFFFFFFFFFFFFFD6"), sp("binary"), sp("binary")), "SET @a = -42"},
		{[]SetTarget{u("@a")}, fieldsOf(mysql.MYSQL_TYPE_NEWDECIMAL, str, str, str),
			lenencRow(sp("1.50"), sp("2"), sp("binary"), sp("binary")), "SET @a = 1.50"},
		{[]SetTarget{u("@a")}, fieldsOf(mysql.MYSQL_TYPE_DOUBLE, str, str, str),
			lenencRow(sp("0.1"), sp("0"), sp("binary"), sp("binary")), "SET @a = 0.1E0"},
		{[]SetTarget{u("@a")}, fieldsOf(mysql.MYSQL_TYPE_DOUBLE, str, str, str),
			lenencRow(sp("1e30"), sp("0"), sp("binary"), sp("binary")), "SET @a = 1e30"},
		{[]SetTarget{u("@u")}, fieldsOf(str, str, str, str),
			lenencRow(sp("ab'c"), sp("616227"), sp("latin1"), sp("latin1_bin")), "SET @u = _latin1 X'616227' COLLATE latin1_bin"},
		{[]SetTarget{u("@`b`")}, fieldsOf(mysql.MYSQL_TYPE_LONG_BLOB, str, str, str),
			lenencRow(sp("\x00\xff"), sp("00FF"), sp("binary"), sp("binary")), "SET @`b` = X'00FF'"},
		{[]SetTarget{u("@n")}, fieldsOf(mysql.MYSQL_TYPE_NULL, str, str, str),
			lenencRow(nil, nil, sp("binary"), sp("binary")), "SET @n = NULL"},
		{[]SetTarget{{Name: "time_zone"}, u("@e")}, fieldsOf(str, str, str, str, str),
			lenencRow(sp("+01:00"), sp(""), sp(""), sp("utf8mb4"), sp("utf8mb4_0900_ai_ci")),
			"SET @@SESSION.time_zone = _utf8mb4'+01:00', @e = _utf8mb4 X'' COLLATE utf8mb4_0900_ai_ci"},
		{[]SetTarget{{Name: "sort_buffer_size"}}, fieldsOf(mysql.MYSQL_TYPE_LONGLONG),
			lenencRow(sp("262144")), "SET @@SESSION.sort_buffer_size = 262144"},
		{[]SetTarget{{Name: "sql_mode"}}, fieldsOf(str),
			lenencRow(sp(`a\'b`)), "SET @@SESSION.sql_mode = X'615C2762'"},
	} {
		got, err := replaySet(c.targets, c.fields, c.row)
		if err != nil || got != c.want {
			t.Errorf("replaySet(%v) = %q, %v; want %q", c.targets, got, err, c.want)
		}
	}
	for name, c := range map[string]struct {
		fields []*mysql.Field
		row    []byte
	}{
		"short row":      {fieldsOf(mysql.MYSQL_TYPE_LONGLONG, str, str, str), lenencRow(sp("1"))},
		"long row":       {fieldsOf(mysql.MYSQL_TYPE_LONGLONG, str, str, str), append(lenencRow(sp("1"), sp("1"), sp("b"), sp("b")), 1)},
		"bad number":     {fieldsOf(mysql.MYSQL_TYPE_LONGLONG, str, str, str), lenencRow(sp("1; DROP"), sp("1"), sp("b"), sp("b"))},
		"bad collation":  {fieldsOf(str, str, str, str), lenencRow(sp("x"), sp("78"), sp("utf8mb4"), sp("x' OR"))},
		"bad hex":        {fieldsOf(str, str, str, str), lenencRow(sp("x"), sp("7"), sp("utf8mb4"), sp("utf8mb4_bin"))},
		"temporal":       {fieldsOf(mysql.MYSQL_TYPE_DATETIME, str, str, str), lenencRow(sp("x"), sp("78"), sp("b"), sp("b"))},
		"too few fields": {fieldsOf(mysql.MYSQL_TYPE_LONGLONG), lenencRow(sp("1"))},
	} {
		if got, err := replaySet([]SetTarget{u("@a")}, c.fields, c.row); err == nil {
			t.Errorf("%s: replaySet = %q, want an error", name, got)
		}
	}
	if q := readbackQuery([]SetTarget{u("@a"), {Name: "time_zone"}}); q != "SELECT @a, HEX(@a), CHARSET(@a), COLLATION(@a), @@SESSION.time_zone" {
		t.Errorf("readbackQuery = %q", q)
	}
}

// FuzzReplaySet: whatever the read-back's row bytes and column types,
// replaySet returns an error or a SET whose every value is one literal
// (Classify reads it back as a session SET with nothing to evaluate).
func FuzzReplaySet(f *testing.F) {
	f.Add(lenencRow(sp("-42"), sp("D6"), sp("binary"), sp("binary")), uint8(mysql.MYSQL_TYPE_LONGLONG), uint8(mysql.MYSQL_TYPE_VAR_STRING))
	f.Add(lenencRow(sp("x"), sp("78"), sp("utf8mb4"), sp("utf8mb4_bin"), sp("+01:00")), uint8(mysql.MYSQL_TYPE_VAR_STRING), uint8(mysql.MYSQL_TYPE_VAR_STRING))
	f.Add(lenencRow(nil, nil, sp("binary"), sp("binary"), sp("0.5")), uint8(mysql.MYSQL_TYPE_NULL), uint8(mysql.MYSQL_TYPE_DOUBLE))
	f.Add([]byte{0xfc, 0xff}, uint8(mysql.MYSQL_TYPE_DOUBLE), uint8(mysql.MYSQL_TYPE_LONG))
	f.Fuzz(func(t *testing.T, row []byte, userType, sysType uint8) {
		targets := []SetTarget{{User: true, Name: "@a"}, {Name: "time_zone"}}
		fields := fieldsOf(userType, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_VAR_STRING, sysType)
		q, err := replaySet(targets, fields, row)
		if err != nil {
			return
		}
		st, cerr := Classify(q)
		if cerr != nil || st.Kind != KindSession || st.Eval != nil || strings.Contains(q, ";") {
			t.Fatalf("replaySet gave %q: %+v, %v", q, st, cerr)
		}
	})
}

// TestEvalReplayFailure: a SET whose values cannot be read back (here the
// primary connection that ran it is gone) is not replayed at all: the
// session's reads stay on the primary (session-state), its replica
// connections are closed, and the fallback is counted.
func TestEvalReplayFailure(t *testing.T) {
	s, _, _, _ := memRouted(t, "token-ryw-mr")
	s.primary.broken = true
	s.evalReplay([]SetTarget{{User: true, Name: "@u"}})
	if !s.state.Holds().Has(HoldSessionState) || len(s.state.replay) != 0 || s.replicas[0] != nil {
		t.Fatalf("after a failed read-back: holds %q, replay %q, replica open %v", s.state.Holds(), s.state.replay, s.replicas[0] != nil)
	}
	if pin := s.state.readPin(Stmt{Kind: KindRead}, 1); pin != "session-state" {
		t.Fatalf("read pin %q, want session-state", pin)
	}
	if n := testutil.ToFloat64(s.srv.m.sessionState.WithLabelValues("set-not-evaluated")); n != 1 {
		t.Fatalf("set-not-evaluated = %v, want 1", n)
	}
	// A pending SET (it warned) is read back by evalPending, the hold
	// then gone.
	s.state.pendingEval, s.state.held = []SetTarget{{Name: "time_zone"}}, HoldSetPending
	s.evalPending()
	if s.state.pendingEval != nil || s.state.Holds().Has(HoldSetPending) {
		t.Fatalf("after evalPending: pending %v, holds %q", s.state.pendingEval, s.state.Holds())
	}
}

// TestOKStatus: the status and warnings of an OK packet ending a result,
// read without go-mysql (eofFromOK's common path), whatever the sizes of
// its affected-rows and insert-id integers; a short packet is refused.
func TestOKStatus(t *testing.T) {
	ok := func(affected, insert uint64, status, warnings uint16) []byte {
		p := []byte{mysql.EOF_HEADER}
		p = append(p, mysql.PutLengthEncodedInt(affected)...)
		p = append(p, mysql.PutLengthEncodedInt(insert)...)
		return append(p, byte(status), byte(status>>8), byte(warnings), byte(warnings>>8))
	}
	for _, c := range []struct {
		affected, insert uint64
		status, warnings uint16
	}{{0, 0, 2, 0}, {300, 70000, 0x4022, 7}, {1 << 40, 1, 0xffff, 0xffff}} {
		p := ok(c.affected, c.insert, c.status, c.warnings)
		if st, w, good := okStatus(p); !good || st != c.status || w != c.warnings {
			t.Errorf("%+v: okStatus = %#x, %d, %v", c, st, w, good)
		}
		if _, _, good := okStatus(p[:len(p)-1]); good {
			t.Errorf("%+v: a short packet read", c)
		}
	}
	for _, p := range [][]byte{nil, {0xfe}, {0xfe, 0xfb, 0, 2, 0, 0, 0}, {0xfe, 0xfc, 1}} {
		if _, _, good := okStatus(p); good {
			t.Errorf("okStatus(%x) read", p)
		}
	}
}

// FuzzOKStatus: okStatus never panics, and reads what a well-formed
// packet with those fields carries.
func FuzzOKStatus(f *testing.F) {
	f.Add([]byte{0xfe, 0, 0, 2, 0, 0, 0})
	f.Add([]byte{0xfe, 0xfc, 1, 1, 0xfd, 1, 2, 3, 0x22, 0x40, 1, 0})
	f.Add([]byte{0xfe, 0xfe})
	f.Fuzz(func(t *testing.T, p []byte) {
		st, w, good := okStatus(p)
		if !good {
			return
		}
		// Re-encoded from what was read, the fields give the same status.
		if len(p) < 7 {
			t.Fatalf("okStatus(%x) = %#x, %d from a packet too short", p, st, w)
		}
		q := append([]byte{mysql.EOF_HEADER, 0, 0}, byte(st), byte(st>>8), byte(w), byte(w>>8))
		if st2, w2, ok2 := okStatus(q); !ok2 || st2 != st || w2 != w {
			t.Fatalf("okStatus round trip: %#x %d, want %#x %d", st2, w2, st, w)
		}
	})
}
