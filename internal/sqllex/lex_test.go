package sqllex

import (
	"strings"
	"testing"
)

// lexAll returns the tokens of s and the comments reported while lexing
// them.
func lexAll(s string) ([]Token, []Comment, bool) {
	var cs []Comment
	l := Lexer{S: s, Comment: func(c Comment) { cs = append(cs, c) }}
	var ts []Token
	for t := l.Next(); t.Kind != EOF; t = l.Next() {
		ts = append(ts, t)
	}
	return ts, cs, l.Unterminated
}

func TestTokens(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string // token texts
	}{
		{"SELECT 1", []string{"SELECT", "1"}},
		{"select `a``b`, 'it''s', \"q\\\"\" from t", []string{"select", "`a``b`", ",", "'it''s'", ",", `"q\""`, "from", "t"}},
		{"SET @x := @@session.sql_mode, @'q r'", []string{"SET", "@x", ":=", "@@session.sql_mode", ",", "@'q r'"}},
		{"SELECT 1--2", []string{"SELECT", "1", "-", "-", "2"}},
		{"SELECT 1 -- c\n, 2", []string{"SELECT", "1", ",", "2"}},
		{"SELECT 1 --\x01c\n, 2", []string{"SELECT", "1", ",", "2"}},
		{"SELECT 1 --", []string{"SELECT", "1"}},
		{"SELECT 1 # c\n+ 2", []string{"SELECT", "1", "+", "2"}},
		{"SELECT /*! STRAIGHT_JOIN */ a", []string{"SELECT", "STRAIGHT_JOIN", "a"}},
		{"SELECT /*!50700 1 */", []string{"SELECT", "1"}},
		{"SELECT /*+ MAX_EXECUTION_TIME(1) */ a", []string{"SELECT", "a"}},
	} {
		ts, _, un := lexAll(c.in)
		var got []string
		for _, tk := range ts {
			got = append(got, tk.Text)
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") || un {
			t.Errorf("%q: tokens %q (unterminated %v), want %q", c.in, got, un, c.want)
		}
	}
}

func TestComments(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []Comment
		un   bool
	}{
		{"SELECT /* a */ 1 -- b\n# c", []Comment{{Kind: Block, Body: " a ", Start: 7, BodyStart: 9}, {Kind: Line, Body: " b", Start: 17, BodyStart: 19}, {Kind: Line, Body: " c", Start: 22, BodyStart: 23}}, false},
		{"/*+ hint */ SELECT", []Comment{{Kind: Hint, Body: " hint ", Start: 0, BodyStart: 3}}, false},
		{"SELECT '/* no */' /* yes", []Comment{{Kind: Block, Body: " yes", Start: 18, BodyStart: 20, Unterminated: true}}, true},
		{"SELECT /*! 1 /* inner */ */", []Comment{{Kind: Block, Body: " inner ", Start: 13, BodyStart: 15}}, false},
		{"SELECT `#x` \"--  y\"", nil, false},
		{"SELECT 'open", nil, true},
		{"SELECT /*! 1", nil, true},
	} {
		_, cs, un := lexAll(c.in)
		if len(cs) != len(c.want) || un != c.un {
			t.Errorf("%q: comments %+v (unterminated %v), want %+v (%v)", c.in, cs, un, c.want, c.un)
			continue
		}
		for i := range cs {
			if cs[i] != c.want[i] {
				t.Errorf("%q: comment %d %+v, want %+v", c.in, i, cs[i], c.want[i])
			}
		}
	}
}

// checkLex checks the lexer's invariants on s: it ends; tokens and
// comments are in order, inside the statement and alias it at their
// offsets, and never overlap; NextComment reports exactly the comments
// Next does.
func checkLex(t *testing.T, s string) {
	t.Helper()
	var cs []Comment
	l := Lexer{S: s, Comment: func(c Comment) { cs = append(cs, c) }}
	type span struct{ a, b int }
	var spans []span
	for n := 0; ; n++ {
		if n > len(s)+1 {
			t.Fatalf("%q: Next does not end", s)
		}
		tk := l.Next()
		if tk.Kind == EOF {
			break
		}
		if tk.Pos < 0 || tk.Pos+len(tk.Text) > len(s) || s[tk.Pos:tk.Pos+len(tk.Text)] != tk.Text || tk.Text == "" {
			t.Fatalf("%q: token %+v does not alias the statement", s, tk)
		}
		spans = append(spans, span{tk.Pos, tk.Pos + len(tk.Text)})
	}
	for _, c := range cs {
		if c.BodyStart < c.Start || c.BodyStart+len(c.Body) > len(s) || s[c.BodyStart:c.BodyStart+len(c.Body)] != c.Body {
			t.Fatalf("%q: comment %+v does not alias the statement", s, c)
		}
		end := c.BodyStart + len(c.Body)
		if c.Kind != Line && !c.Unterminated {
			end += 2
		}
		spans = append(spans, span{c.Start, end})
	}
	// No two spans overlap.
	for i := range spans {
		for j := range spans {
			if i != j && spans[i].a < spans[j].b && spans[j].a < spans[i].b {
				t.Fatalf("%q: spans %v and %v overlap", s, spans[i], spans[j])
			}
		}
	}
	m := Lexer{S: s}
	var got []Comment
	for n := 0; ; n++ {
		if n > len(s)+1 {
			t.Fatalf("%q: NextComment does not end", s)
		}
		c, ok := m.NextComment()
		if !ok {
			break
		}
		got = append(got, c)
	}
	if len(got) != len(cs) {
		t.Fatalf("%q: NextComment found %+v, Next reported %+v", s, got, cs)
	}
	for i := range got {
		if got[i] != cs[i] {
			t.Fatalf("%q: NextComment found %+v, Next reported %+v", s, got[i], cs[i])
		}
	}
	if m.Unterminated != l.Unterminated {
		t.Fatalf("%q: Unterminated %v by NextComment, %v by Next", s, m.Unterminated, l.Unterminated)
	}
}

func TestInvariants(t *testing.T) {
	for _, s := range fuzzSeeds {
		checkLex(t, s)
	}
}

var fuzzSeeds = []string{
	"", "SELECT 1", "SELECT /* consistent_read_id:u1 */ a FROM t",
	"/*+ ;min_gtid=3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5 */ SELECT 1",
	"SELECT 'a\\'b' -- c\n/* d */ # e", "SELECT /*! 1 /* x */ */ 2", "SELECT `a``` /* b",
	"SELECT @'x', @@y.z := 1", "--", "-- ", "/*", "/*!", "*/", "SELECT '", "x--\x7fy\n",
}

// FuzzLexer: any input keeps the invariants checkLex checks.
func FuzzLexer(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkLex(t, s) })
}
