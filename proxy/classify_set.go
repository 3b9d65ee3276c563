package proxy

import (
	"strings"

	"github.com/causallab/causallab/internal/sqllex"
)

// SetTarget is one target of a session SET whose value the proxy reads
// back after the SET ran once on the primary (Stmt.Eval).
type SetTarget struct {
	// User: a user variable (Name as written, with its '@'); else a
	// session system variable (Name without @@ and scope).
	User bool
	Name string
}

// setPhase is where a setParser is in one assignment.
type setPhase uint8

const (
	setTarget setPhase = iota // at a target
	setEq                     // after a target, before '=' or ':='
	setValue                  // in a value
)

// setParser reads the assignments of a session SET, token by token:
// each target, and whether each value is a literal (setLiteral).
type setParser struct {
	l     *sqllex.Lexer
	phase setPhase
	depth int
	// vals are the current value's tokens; names: the current
	// assignment is SET NAMES or SET CHARACTER SET (literal, no target).
	vals  []sqllex.Token
	names bool
	user  bool // the current target is a user variable
	prev  sqllex.Token
	// expr: some value is not a literal; anyNames: some assignment is
	// NAMES / CHARACTER SET; global: some target is a global (or
	// persisted) variable; globalWords: the last scope word was GLOBAL
	// (or PERSIST...), which later names without one take.
	expr, anyNames, global, globalWords bool
	targets                             []SetTarget
	st                                  Stmt
}

// token reads t; done with the statement's classification when t
// decides it alone.
func (p *setParser) token(t sqllex.Token) (Stmt, bool) {
	defer func() { p.prev = t }()
	switch {
	case t.Kind == sqllex.Var && isCausalTokenVar(t.Text):
		// A later target (SET @a = 1, @causal_token = ...) is an
		// assignment the proxy would not evaluate; a use on the right
		// reads the server's variable, not the token: primary.
		st := primary(ReasonUnclassified)
		if p.phase == setTarget {
			n := p.l.Next()
			st.assignsToken = n.Punct('=') || n.Kind == sqllex.Assign
		}
		return st, true
	case isTrackGTIDs(t):
		return primary(ReasonUnclassified), true
	}
	switch p.phase {
	case setTarget:
		return p.target(t)
	case setEq:
		if !t.Punct('=') && t.Kind != sqllex.Assign {
			return primary(ReasonUnclassified), true
		}
		p.phase = setValue
		return Stmt{}, false
	}
	return p.value(t)
}

// target reads the token that begins an assignment.
func (p *setParser) target(t sqllex.Token) (Stmt, bool) {
	p.phase, p.user, p.names = setEq, false, false
	st, done := p.targetName(t)
	if !done && len(p.targets) > 0 {
		n := p.targets[len(p.targets)-1]
		if !n.User && pinningVar(n.Name) {
			// Where it ran, the session stays (reads on the primary,
			// the connection kept, reset at its end); never replayed.
			return Stmt{Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true}, true
		}
		if !n.User && sqllex.EqualFoldUpper(strings.Trim(n.Name, "`"), "ENABLE_CASCADE_TRIGGERS") {
			p.st.CascadeTriggers = true
		}
		if !n.User && sqllex.EqualFoldUpper(strings.Trim(n.Name, "`"), "SQL_AUTO_IS_NULL") {
			p.st.AutoIsNull = true
		}
		if !n.User && sqllex.EqualFoldUpper(strings.Trim(n.Name, "`"), "SESSION_TRACK_SYSTEM_VARIABLES") {
			p.st.TrackVars = true
		}
	}
	return st, done
}

// pinningVar: setting session variable name keeps the session on the
// primary until it is reset. session_track_state_change is the proxy's
// own view of the session's state. sql_log_bin: the writes made while it
// is off are not replicated, so they exist on the primary alone, whatever
// the variable is set to later (MySQL's own tests write that way, and
// read their rows back).
func pinningVar(name string) bool {
	name = strings.Trim(name, "`")
	return sqllex.EqualFoldUpper(name, "SESSION_TRACK_STATE_CHANGE") || sqllex.EqualFoldUpper(name, "SQL_LOG_BIN")
}

// targetName reads the target an assignment begins with.
func (p *setParser) targetName(t sqllex.Token) (Stmt, bool) {
	switch {
	case t.Kind == sqllex.Var:
		p.user = true
		p.st.UsesUserVar = true
		p.targets = append(p.targets, SetTarget{User: true, Name: t.Text})
	case t.Kind == sqllex.SysVar:
		if globalScope(t) {
			p.global = true
			return Stmt{}, false
		}
		p.targets = append(p.targets, SetTarget{Name: sysVarName(t)})
	case t.Is("GLOBAL"), t.Is("PERSIST"), t.Is("PERSIST_ONLY"):
		// A scope word covers the variable it precedes and every later
		// one written without a scope word or @@ (MySQL: "the most
		// recent GLOBAL or SESSION modifier").
		if n := p.l.Next(); n.Kind != sqllex.Word && n.Kind != sqllex.Ident {
			return primary(ReasonWrite), true
		}
		p.global, p.globalWords = true, true
	case t.Is("SESSION"), t.Is("LOCAL"):
		p.globalWords = false
		n := p.l.Next()
		if isTrackGTIDs(n) {
			return primary(ReasonUnclassified), true
		}
		if n.Kind != sqllex.Word && n.Kind != sqllex.Ident {
			return primary(ReasonUnclassified), true
		}
		p.targets = append(p.targets, SetTarget{Name: n.Text})
	case t.Is("NAMES"), t.Is("CHARSET"):
		p.phase, p.names, p.anyNames = setValue, true, true
	case t.Is("CHARACTER"):
		if !p.l.Next().Is("SET") {
			return primary(ReasonUnclassified), true
		}
		p.phase, p.names, p.anyNames = setValue, true, true
	case (t.Kind == sqllex.Word || t.Kind == sqllex.Ident) && p.globalWords:
		p.global = true // under an earlier GLOBAL
	case t.Kind == sqllex.Word, t.Kind == sqllex.Ident:
		p.targets = append(p.targets, SetTarget{Name: t.Text})
	default:
		return primary(ReasonUnclassified), true
	}
	return Stmt{}, false
}

// value reads a token of a value: up to the comma (outside parentheses)
// that begins the next assignment, or a semicolon that must end the
// statement.
func (p *setParser) value(t sqllex.Token) (Stmt, bool) {
	switch {
	case t.Punct('('):
		p.depth++
		if isLockFunction(p.prev) {
			p.st.NamedLock = true
		}
		p.st.LastInsertID = p.st.LastInsertID || p.prev.Is("LAST_INSERT_ID")
	case t.Punct(')'):
		p.depth--
	case t.Punct(',') && p.depth == 0:
		p.endValue()
		p.phase = setTarget
		return Stmt{}, false
	case t.Punct(';') && p.depth == 0:
		if p.l.Next().Kind != sqllex.EOF {
			return primary(ReasonMultiStatement), true
		}
		return Stmt{}, false
	case t.Kind == sqllex.Var:
		p.st.UsesUserVar = true
	}
	p.vals = append(p.vals, t)
	return Stmt{}, false
}

// endValue decides whether the value just read is a literal.
func (p *setParser) endValue() {
	if !p.names && !setLiteral(p.vals, p.user) {
		p.expr = true
	}
	p.vals = p.vals[:0]
}

// finish is the classification once every token was read.
func (p *setParser) finish() Stmt {
	if p.phase != setValue {
		return primary(ReasonUnclassified)
	}
	p.endValue()
	if p.global {
		if len(p.targets) == 0 && !p.anyNames {
			return primary(ReasonWrite) // global variables only
		}
		// A session assignment beside a global one (SET @@session.x =
		// ..., @@global.x = ...): run once, on the primary, where the
		// session then stays (not replayed: the global part must not
		// run again).
		st := Stmt{Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true, UsesUserVar: p.st.UsesUserVar, CascadeTriggers: p.st.CascadeTriggers}
		for _, t := range p.targets {
			st.SetsUserVar = st.SetsUserVar || t.User
		}
		return st
	}
	st := p.st
	st.Kind = KindSession
	if !p.expr {
		return st
	}
	if p.anyNames {
		// SET NAMES ..., @a = <expression>: not replayed; the session's
		// reads stay on the primary.
		st.Kind, st.Reason, st.PinsSession = KindPrimary, ReasonUserVariable, true
		st.SetsUserVar = st.UsesUserVar
		return st
	}
	st.Eval = p.targets
	return st
}

// globalScope: system variable t names the global (or persisted) scope.
func globalScope(t sqllex.Token) bool {
	name := t.Text[2:]
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			sc := name[:i]
			return sqllex.EqualFoldUpper(sc, "GLOBAL") || sqllex.EqualFoldUpper(sc, "PERSIST") || sqllex.EqualFoldUpper(sc, "PERSIST_ONLY")
		}
	}
	return false
}

// setLiteral reports whether a SET value's tokens v are one literal, the
// same on every server and at every moment: a string (with an optional
// character set introducer and COLLATE), a hexadecimal or bit literal, a
// number, NULL, TRUE, FALSE; for a system variable (user false) also a
// keyword value (ON, SYSTEM, DEFAULT, a sql_mode name). Anything else (a
// function, a variable, a subquery, an operator) is an expression.
func setLiteral(v []sqllex.Token, user bool) bool {
	ok, intro := stringLiteral(v)
	switch {
	case ok:
		return true
	case intro:
		return false
	case numberTokens(v):
		return true
	case len(v) == 1 && v[0].Kind == sqllex.Word:
		w := v[0]
		if w.Is("NULL") || w.Is("TRUE") || w.Is("FALSE") {
			return true
		}
		return !user && !niladic(w)
	}
	return false
}

// stringLiteral reports whether v is a string, hexadecimal or bit
// literal, with an optional introducer (intro: v starts with one) and
// COLLATE.
func stringLiteral(v []sqllex.Token) (ok, intro bool) {
	intro = len(v) > 1 && v[0].Kind == sqllex.Word && v[0].Text[0] == '_'
	if intro {
		v = v[1:]
	}
	if n := len(v); n >= 3 && v[n-2].Is("COLLATE") && v[n-1].Kind != sqllex.Punct {
		v = v[:n-2]
	}
	switch {
	case len(v) == 1 && v[0].Kind == sqllex.String:
		return true, intro
	case len(v) == 2 && v[1].Kind == sqllex.String && v[1].Pos == v[0].Pos+1 &&
		(v[0].Is("X") || v[0].Is("B") || v[0].Is("N")):
		return true, intro // X'4a', B'01', N'text'
	case len(v) == 1 && v[0].Kind == sqllex.Word && len(v[0].Text) > 2 && v[0].Text[0] == '0' &&
		(v[0].Text[1] == 'x' || v[0].Text[1] == 'b'):
		return true, intro // 0x4a, 0b01
	}
	return false, intro
}

// numberTokens: v is a number ([sign] digits [. digits] [e [sign]
// digits], as the lexer splits it).
func numberTokens(v []sqllex.Token) bool {
	i := 0
	if i < len(v) && (v[i].Punct('-') || v[i].Punct('+')) {
		i++
	}
	digits := false
	for ; i < len(v); i++ {
		t := v[i]
		switch {
		case t.Kind == sqllex.Word && numberWord(t.Text):
			digits = true
			if c := t.Text[len(t.Text)-1]; (c == 'e' || c == 'E') && i+1 < len(v) && (v[i+1].Punct('-') || v[i+1].Punct('+')) {
				i++
			}
		case t.Punct('.'):
		default:
			return false
		}
	}
	return digits
}

// numberWord: w is digits with at most an exponent ("5", "5e3", "5e").
func numberWord(w string) bool {
	if w[0] < '0' || w[0] > '9' {
		return false
	}
	exp := false
	for i := 1; i < len(w); i++ {
		c := w[i]
		switch {
		case c >= '0' && c <= '9':
		case (c == 'e' || c == 'E') && !exp:
			exp = true
		default:
			return false
		}
	}
	return true
}

// niladic: word w is a function called without parentheses, whose value
// is the moment's or the session's.
func niladic(w sqllex.Token) bool {
	for _, f := range [...]string{"CURRENT_TIMESTAMP", "CURRENT_DATE", "CURRENT_TIME", "CURRENT_USER",
		"CURRENT_ROLE", "LOCALTIME", "LOCALTIMESTAMP", "UTC_DATE", "UTC_TIME", "UTC_TIMESTAMP"} {
		if w.Is(f) {
			return true
		}
	}
	return false
}

// primaryRead: a read of a table the classifier sent to the primary (a
// locking read, a session or locking function, server state, a user
// variable): what it showed counts for the session's monotonic reads
// (session.seenAfterPrimary). A read of variables and functions alone
// (SELECT @@x, SELECT LAST_INSERT_ID()) shows no data: it raises
// nothing, or drivers' connect-time variable reads would hold every
// later read of the session to the primary's position.
func (st Stmt) primaryRead() bool {
	if st.Kind != KindPrimary || !st.FromTable {
		return false
	}
	switch st.Reason {
	case ReasonLockingRead, ReasonSessionFunction, ReasonServerState, ReasonLockingFunction, ReasonUserVariable:
		return true
	}
	return false
}

// replayedState reports whether the session state st makes is the
// proxy's to know (a SET or USE it replays, a temporary table, user
// variables a statement assigns: each with its own hold), so that the
// server's report of a state change after it adds nothing.
func (st Stmt) replayedState() bool {
	return st.Kind == KindSession || st.TempTable || st.SetsUserVar
}
