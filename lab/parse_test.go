package lab

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/router"
)

func TestParseCondition(t *testing.T) {
	c, err := ParseCondition(" Straggler + heavy ")
	if err != nil || c.String() != "straggler+heavy" {
		t.Fatalf("%v %v", c, err)
	}
	for _, bad := range []string{"", "fast", "identical+heavy", "straggler+", "+"} {
		if _, err := ParseCondition(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{"identical", "straggler+heavy", "apply-delay", "heavy+heavy", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCondition(s)
		if err != nil {
			return
		}
		again, err := ParseCondition(c.String())
		if err != nil || again.String() != c.String() {
			t.Fatalf("%q -> %q -> %q, %v", s, c.String(), again.String(), err)
		}
	})
}

// resultset builds a text-protocol-like result set of int cells (nil: NULL).
func resultset(rows [][]any) *mysql.Resultset {
	rs := &mysql.Resultset{}
	for _, r := range rows {
		var vals []mysql.FieldValue
		for _, c := range r {
			switch v := c.(type) {
			case nil:
				vals = append(vals, mysql.NewFieldValue(mysql.FieldValueTypeNull, 0, nil))
			case int:
				vals = append(vals, mysql.NewFieldValue(mysql.FieldValueTypeSigned, uint64(v), nil))
			case string:
				vals = append(vals, mysql.NewFieldValue(mysql.FieldValueTypeString, 0, []byte(v)))
			}
		}
		rs.Values = append(rs.Values, vals)
	}
	return rs
}

func TestParseReadRows(t *testing.T) {
	hot := make([]int64, 2)
	own, err := parseReadRows(resultset([][]any{{5, 0, 7}, {"5", 1, "9"}}), 3, hot)
	if err != nil || own != 5 || hot[0] != 7 || hot[1] != 9 {
		t.Fatalf("own %d hot %v err %v", own, hot, err)
	}
	bad := map[string][][]any{
		"too few rows":     {{5, 0, 7}},
		"missing own row":  {{nil, 0, 7}, {nil, 1, 9}},
		"wrong hot id":     {{5, 1, 7}, {5, 0, 9}},
		"own differs":      {{5, 0, 7}, {6, 1, 9}},
		"short row":        {{5, 0}, {5, 1, 9}},
		"not a number":     {{"x", 0, 7}, {"x", 1, 9}},
		"null hot version": {{5, 0, nil}, {5, 1, 9}},
		"too many rows":    {{5, 0, 7}, {5, 1, 9}, {5, 2, 1}},
	}
	for name, rows := range bad {
		if _, err := parseReadRows(resultset(rows), 3, hot); err == nil || !strings.Contains(err.Error(), "session 3") {
			t.Errorf("%s: accepted or unclear error: %v", name, err)
		}
	}
}

// FuzzParseReadRows: arbitrary text cells never panic the decoder, and what
// it accepts is exactly the expected shape.
func FuzzParseReadRows(f *testing.F) {
	f.Add("5", "0", "7", "5", "1", "9")
	f.Add("", "0", "x", "-1", "1", "99999999999999999999")
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g string) {
		hot := make([]int64, 2)
		own, err := parseReadRows(resultset([][]any{{a, b, c}, {d, e, g}}), 0, hot)
		if err != nil {
			return
		}
		if b != "0" && strings.TrimLeft(b, "+0") != "" {
			t.Fatalf("accepted hot id %q for row 0", b)
		}
		_ = own
	})
}

func TestProxyRefusal(t *testing.T) {
	for _, c := range []struct {
		err      error
		reason   string
		deferred bool
		ok       bool
	}{
		{mysql.NewError(mysql.ER_UNKNOWN_ERROR, "causallab proxy: cannot serve this read consistently: "+router.ReasonTimedOut.String()+" (token epoch 1, topology epoch 1)"), router.ReasonTimedOut.String(), false, true},
		{fmt.Errorf("lab: x: %w", mysql.NewError(mysql.ER_UNKNOWN_ERROR, "causallab proxy: cannot serve this read consistently: write-lost-in-failover (token epoch 1, topology epoch 2)")), "write-lost-in-failover", false, true},
		{mysql.NewError(1205, "causallab proxy: read deferred: wait-budget-spent; retry after 144 ms (no replica holds what the read needs; the primary was not used)"), "wait-budget-spent", true, true},
		{mysql.NewError(mysql.ER_UNKNOWN_ERROR, "causallab proxy: backend lost"), "", false, false},
		{errors.New("causallab proxy: cannot serve this read consistently: timed-out"), "", false, false},
	} {
		r, d, ok := proxyRefusal(c.err)
		if r != c.reason || d != c.deferred || ok != c.ok {
			t.Errorf("%v: (%q, %v, %v), want (%q, %v, %v)", c.err, r, d, ok, c.reason, c.deferred, c.ok)
		}
	}
}
