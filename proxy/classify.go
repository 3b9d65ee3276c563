package proxy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/causallab/causallab/hashroute"
)

// Kind is what a statement does, as far as routing is concerned.
type Kind uint8

const (
	// KindRead is a plain read that may be routed to a replica.
	KindRead Kind = iota
	// KindPrimary must run on the primary (see Reason).
	KindPrimary
	// KindSession changes session state (SET, SET NAMES, USE) and is replayed
	// on every backend connection the session uses.
	KindSession
	// KindBegin starts a transaction (BEGIN, START TRANSACTION): primary.
	KindBegin
	// KindEnd ends a transaction (COMMIT, ROLLBACK without TO): primary.
	KindEnd
	// KindSetToken is `SET @causal_token = '<token>'`: answered by the
	// proxy, never forwarded; Stmt.Token holds the value.
	KindSetToken
	// KindGetToken is `SELECT @causal_token`: answered by the proxy with the
	// session's current token.
	KindGetToken
	// KindTrackGTIDs is `SET [SESSION] session_track_gtids = <v>`: answered
	// by the proxy (the backends always track OWN_GTID); Stmt.TrackGTIDs
	// holds whether the client now wants GTIDs forwarded.
	KindTrackGTIDs
)

func (k Kind) String() string {
	switch k {
	case KindRead:
		return "read"
	case KindPrimary:
		return "primary"
	case KindSession:
		return "session"
	case KindBegin:
		return "begin"
	case KindEnd:
		return "end"
	case KindSetToken:
		return "set-token"
	case KindGetToken:
		return "get-token"
	case KindTrackGTIDs:
		return "track-gtids"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Reason says why a statement must stay on the primary. Every reason is a
// label of the proxy_primary_statements_total counter.
type Reason uint8

const (
	// ReasonNone: the statement is not pinned to the primary.
	ReasonNone Reason = iota
	// ReasonWrite: DML, DDL, administrative statements, CALL.
	ReasonWrite
	// ReasonTransaction: transaction control (BEGIN, COMMIT, SAVEPOINT, XA,
	// SET TRANSACTION, LOCK TABLES).
	ReasonTransaction
	// ReasonLockingRead: SELECT ... FOR UPDATE / FOR SHARE / LOCK IN SHARE MODE.
	ReasonLockingRead
	// ReasonLockingFunction: GET_LOCK, RELEASE_LOCK, IS_FREE_LOCK and friends.
	ReasonLockingFunction
	// ReasonSessionFunction: a function whose answer lives in the session on
	// the primary (LAST_INSERT_ID, FOUND_ROWS, ROW_COUNT).
	ReasonSessionFunction
	// ReasonTempTable: CREATE/DROP TEMPORARY TABLE.
	ReasonTempTable
	// ReasonUserVariable: a statement that assigns user variables (:= or
	// SELECT ... INTO @v), so they exist only on the primary.
	ReasonUserVariable
	// ReasonIntoFile: SELECT ... INTO OUTFILE / DUMPFILE.
	ReasonIntoFile
	// ReasonShow: SHOW (warnings, status and the like describe the
	// connection that ran the previous statement).
	ReasonShow
	// ReasonUnclassified: the classifier did not recognise the statement
	// (or it was lexically broken); sent to the primary and counted.
	ReasonUnclassified
	// ReasonMultiStatement: more than one statement in one query.
	ReasonMultiStatement
	numReasons
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonWrite:
		return "write"
	case ReasonTransaction:
		return "transaction"
	case ReasonLockingRead:
		return "locking-read"
	case ReasonLockingFunction:
		return "locking-function"
	case ReasonSessionFunction:
		return "session-function"
	case ReasonTempTable:
		return "temp-table"
	case ReasonUserVariable:
		return "user-variable"
	case ReasonIntoFile:
		return "into-file"
	case ReasonShow:
		return "show"
	case ReasonUnclassified:
		return "unclassified"
	case ReasonMultiStatement:
		return "multi-statement"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// TokenForm says how a token reached the proxy.
type TokenForm uint8

const (
	// TokenNone: the statement carries no token.
	TokenNone TokenForm = iota
	// TokenComment: /* causal_token:<token> */.
	TokenComment
	// TokenMinGTID: ProxySQL's /*+ ;min_gtid=<gtid set> */ annotation.
	TokenMinGTID
	// TokenSet: SET @causal_token = '<token>'.
	TokenSet
)

// Stmt is the classification of one statement.
type Stmt struct {
	// Kind is what the statement does.
	Kind Kind
	// Reason is why a KindPrimary statement stays on the primary.
	Reason Reason
	// Token is the causal token text the statement carries (comment,
	// min_gtid annotation or SET @causal_token), unvalidated.
	Token string
	// TokenForm is how Token was given.
	TokenForm TokenForm
	// ReadID is the consistent_read_id annotation, if any, as
	// hashroute.Extract found it (plain /* */ comments, comma-separated
	// key:value items, key case-sensitive). It aliases the query.
	ReadID string
	// TempTable is true for CREATE/DROP TEMPORARY TABLE: the session pins
	// its reads to the primary from then on.
	TempTable bool
	// LocksTables is true for LOCK TABLES (pins the session until UNLOCK
	// TABLES) and false with Unlock for UNLOCK TABLES.
	LocksTables, UnlocksTables bool
	// SetsUserVar is true when the statement assigns user variables on the
	// primary only (so reads that use user variables must follow).
	SetsUserVar bool
	// UsesUserVar is true when the statement mentions a user variable.
	UsesUserVar bool
	// TrackGTIDs is the client's wish for KindTrackGTIDs.
	TrackGTIDs bool
	// assignsToken: the statement assigns @causal_token in a form the
	// proxy does not evaluate (Classify returns ErrTokenNotLiteral).
	assignsToken bool
}

// Annotation errors: a statement carrying one is refused with a clear error.
var (
	// ErrEmptyAnnotation: causal_token:, min_gtid= or consistent_read_id:
	// with no value.
	ErrEmptyAnnotation = errors.New("proxy: empty annotation value")
	// ErrConflictingTokens: two different tokens in one statement.
	ErrConflictingTokens = errors.New("proxy: two different causal tokens in one statement")
	// ErrBadReadID: hashroute.Extract refused the statement's
	// consistent_read_id (too long, unterminated comment, two different
	// values); the wrapped *hashroute.ExtractError says which and where.
	ErrBadReadID = errors.New("proxy: bad consistent_read_id")
	// ErrTokenNotLiteral: an assignment to @causal_token other than
	// SET @causal_token = '<token>' alone (an expression, a subquery,
	// SELECT ... INTO or :=). The proxy does not evaluate SQL: forwarded,
	// the server would set a user variable of that name and the session's
	// token would silently stay what it was.
	ErrTokenNotLiteral = errors.New("proxy: @causal_token can only be set to one string literal (SET @causal_token = '<token>'); the proxy does not evaluate expressions")
)

// annotations collects the causal-token annotations of the comments of one
// statement (consistent_read_id is hashroute.Extract's job).
type annotations struct {
	token string
	form  TokenForm
	err   error
	// readIDKey: a plain block comment has a consistent_read_id field in
	// this pass's whitespace-separated reading (checked against Extract's).
	readIDKey bool
	block     bool // the comment being read is a plain block comment
}

func (a *annotations) setErr(err error) {
	if a.err == nil {
		a.err = err
	}
}

// comment parses one comment body: fields separated by whitespace, ',' or
// ';', each either causal_token:<v> or min_gtid=<v> (':' and '=' both
// accepted, keys case-insensitive). Other fields (consistent_read_id among
// them: hashroute.Extract reads it) are ignored: comments are free text.
func (a *annotations) comment(body string, block bool) {
	a.block = block && (body == "" || body[0] != '+')
	i := 0
	for i < len(body) {
		for i < len(body) && (isSpace(body[i]) || body[i] == ';' || body[i] == ',' || body[i] == '+') {
			i++
		}
		start := i
		for i < len(body) && !isSpace(body[i]) && body[i] != ';' && body[i] != ',' {
			i++
		}
		if start < i {
			a.field(body[start:i])
		}
	}
}

func (a *annotations) field(f string) {
	sep := -1
	for j := 0; j < len(f); j++ {
		if f[j] == ':' || f[j] == '=' {
			sep = j
			break
		}
	}
	if sep <= 0 {
		return
	}
	key, val := f[:sep], f[sep+1:]
	switch {
	case equalFoldASCII(key, "CAUSAL_TOKEN"):
		a.setToken(val, TokenComment)
	case equalFoldASCII(key, "MIN_GTID"):
		a.setToken(val, TokenMinGTID)
	case a.block && key == hashroute.Key:
		a.readIDKey = true
	}
}

func (a *annotations) setToken(val string, form TokenForm) {
	if val == "" {
		a.setErr(fmt.Errorf("%w: %s", ErrEmptyAnnotation, formKey(form)))
		return
	}
	if a.form != TokenNone && a.token != val {
		a.setErr(ErrConflictingTokens)
		return
	}
	a.token, a.form = val, form
}

func formKey(f TokenForm) string {
	if f == TokenMinGTID {
		return "min_gtid"
	}
	return "causal_token"
}

// Classify classifies one statement. It returns an error only for broken
// annotations (an empty or conflicting token): a statement it cannot
// understand is not an error but KindPrimary with ReasonUnclassified.
//
// Classify does not allocate for statements without annotations beyond the
// closure of its comment callback, and never uses regular expressions.
func Classify(query string) (Stmt, error) {
	var a annotations
	l := lexer{s: query, comment: a.comment}
	st := classify(&l)
	// Comments after the last token are seen only by draining.
	for t := l.next(); t.kind != tokEOF; t = l.next() {
	}
	if l.unterminated && st.Kind == KindRead {
		st.Kind, st.Reason = KindPrimary, ReasonUnclassified
	}
	if a.err != nil {
		return Stmt{}, a.err
	}
	if st.assignsToken || l.unterminated && st.Kind == KindSetToken {
		return Stmt{}, ErrTokenNotLiteral
	}
	if st.Kind != KindSetToken {
		st.Token, st.TokenForm = a.token, a.form
	}
	ex := hashroute.Extract(query)
	switch {
	case ex.Status == hashroute.EmptyID:
		return Stmt{}, fmt.Errorf("%w: consistent_read_id: %w", ErrEmptyAnnotation, ex.Err())
	case ex.Status.IsError():
		return Stmt{}, fmt.Errorf("%w: %w", ErrBadReadID, ex.Err())
	}
	if ex.Status == hashroute.NoID && a.readIDKey {
		// e.g. /* causal_token:<t> consistent_read_id:u1 */: Extract reads
		// one item "causal_token:..." and no id. Refuse rather than route
		// without the affinity the client asked for.
		return Stmt{}, fmt.Errorf("%w: %s given but not read (separate annotations in one comment with ',')", ErrBadReadID, hashroute.Key)
	}
	if ex.Status == hashroute.Found && strings.ContainsAny(ex.ID, " \t\r\n\f\v") {
		// Extract reads comma-separated items, so a space-separated second
		// annotation would silently become part of the id: refuse it.
		return Stmt{}, fmt.Errorf("%w: value %q contains whitespace (separate annotations in one comment with ',')", ErrBadReadID, ex.ID)
	}
	st.ReadID = ex.ID
	return st, nil
}

func primary(r Reason) Stmt { return Stmt{Kind: KindPrimary, Reason: r} }

func classify(l *lexer) Stmt {
	t := l.next()
	for t.punct('(') {
		t = l.next()
	}
	switch {
	case t.kind != tokWord:
		return primary(ReasonUnclassified)
	case t.is("SELECT"), t.is("WITH"), t.is("TABLE"), t.is("VALUES"):
		return classifySelect(l, t)
	case t.is("SET"):
		return classifySet(l)
	case t.is("USE"):
		return Stmt{Kind: KindSession}
	case t.is("BEGIN"):
		// BEGIN NOT ATOMIC is a compound statement only in stored programs.
		return Stmt{Kind: KindBegin, Reason: ReasonTransaction}
	case t.is("START"):
		if n := l.next(); n.is("TRANSACTION") {
			return Stmt{Kind: KindBegin, Reason: ReasonTransaction}
		}
		return primary(ReasonWrite) // START REPLICA, START GROUP_REPLICATION...
	case t.is("COMMIT"):
		return Stmt{Kind: KindEnd, Reason: ReasonTransaction}
	case t.is("ROLLBACK"):
		for n := l.next(); n.kind != tokEOF; n = l.next() {
			if n.is("TO") {
				return primary(ReasonTransaction) // ROLLBACK TO SAVEPOINT
			}
		}
		return Stmt{Kind: KindEnd, Reason: ReasonTransaction}
	case t.is("SAVEPOINT"), t.is("RELEASE"), t.is("XA"):
		return primary(ReasonTransaction)
	case t.is("LOCK"):
		return Stmt{Kind: KindPrimary, Reason: ReasonTransaction, LocksTables: true}
	case t.is("UNLOCK"):
		return Stmt{Kind: KindPrimary, Reason: ReasonTransaction, UnlocksTables: true}
	case t.is("CREATE"), t.is("DROP"):
		if n := l.next(); n.is("TEMPORARY") {
			return Stmt{Kind: KindPrimary, Reason: ReasonTempTable, TempTable: true}
		}
		return primary(ReasonWrite)
	case t.is("INSERT"), t.is("UPDATE"), t.is("DELETE"), t.is("REPLACE"),
		t.is("ALTER"), t.is("TRUNCATE"), t.is("RENAME"), t.is("GRANT"),
		t.is("REVOKE"), t.is("LOAD"), t.is("CALL"), t.is("HANDLER"),
		t.is("OPTIMIZE"), t.is("ANALYZE"), t.is("REPAIR"), t.is("CHECK"),
		t.is("FLUSH"), t.is("KILL"), t.is("RESET"), t.is("PURGE"),
		t.is("CHANGE"), t.is("STOP"), t.is("INSTALL"), t.is("UNINSTALL"),
		t.is("IMPORT"), t.is("PREPARE"), t.is("EXECUTE"), t.is("DEALLOCATE"),
		t.is("DO"), t.is("CHECKSUM"), t.is("CACHE"), t.is("SHUTDOWN"),
		t.is("RESTART"), t.is("CLONE"):
		st := primary(ReasonWrite)
		scanUserVars(l, &st)
		return st
	case t.is("SHOW"):
		return primary(ReasonShow)
	case t.is("DESCRIBE"), t.is("DESC"), t.is("EXPLAIN"):
		// EXPLAIN ANALYZE runs the statement: only a SELECT may be routed.
		return classifyExplain(l)
	}
	return primary(ReasonUnclassified)
}

// scanUserVars marks a write that assigns user variables.
func scanUserVars(l *lexer, st *Stmt) {
	var prev token
	for t := l.next(); t.kind != tokEOF; t = l.next() {
		if t.kind == tokVar {
			st.UsesUserVar = true
		}
		if t.kind == tokAssign && prev.kind == tokVar {
			st.SetsUserVar = true
			st.assignsToken = st.assignsToken || isCausalTokenVar(prev.text)
		}
		if t.is("INTO") {
			if n := l.next(); n.kind == tokVar {
				st.SetsUserVar, st.UsesUserVar = true, true
				st.assignsToken = st.assignsToken || isCausalTokenVar(n.text)
			}
		}
		prev = t
	}
}

func classifyExplain(l *lexer) Stmt {
	for t := l.next(); t.kind != tokEOF; t = l.next() {
		switch {
		case t.is("SELECT"), t.is("WITH"), t.is("TABLE"):
			st := classifySelect(l, t)
			if st.Kind == KindGetToken {
				return primary(ReasonUnclassified)
			}
			return st
		case t.kind == tokWord && (t.is("ANALYZE") || t.is("FORMAT") || t.is("EXTENDED") || t.is("PARTITIONS") || t.is("TREE") || t.is("JSON") || t.is("TRADITIONAL")):
			continue
		case t.punct('='):
			continue
		case t.kind == tokWord:
			// DESCRIBE tbl [col]: metadata read, routable.
			if n := l.next(); n.kind == tokEOF || n.kind == tokWord || n.kind == tokIdent || n.punct('.') || n.kind == tokString {
				if n.kind == tokEOF {
					return Stmt{Kind: KindRead}
				}
				for m := l.next(); m.kind != tokEOF; m = l.next() {
					if m.kind == tokWord && (m.is("INSERT") || m.is("UPDATE") || m.is("DELETE") || m.is("REPLACE")) {
						return primary(ReasonWrite)
					}
				}
				if t.is("INSERT") || t.is("UPDATE") || t.is("DELETE") || t.is("REPLACE") || t.is("FOR") {
					return primary(ReasonWrite)
				}
				return Stmt{Kind: KindRead}
			}
			return primary(ReasonUnclassified)
		case t.kind == tokIdent:
			return Stmt{Kind: KindRead}
		default:
			return primary(ReasonUnclassified)
		}
	}
	return primary(ReasonUnclassified)
}

// classifySelect scans a SELECT (or WITH/TABLE/VALUES) to its end.
func classifySelect(l *lexer, first token) Stmt {
	st := Stmt{Kind: KindRead}
	pin := func(r Reason) {
		// The first pinning reason wins; later ones are the same outcome.
		if st.Kind == KindRead {
			st.Kind, st.Reason = KindPrimary, r
		}
	}
	var prev token
	words := 0
	onlyToken := first.is("SELECT")
	sawSemicolon := false
	intoVars := false // inside SELECT ... INTO @a, @b
	for t := l.next(); t.kind != tokEOF; prev, t = t, l.next() {
		if sawSemicolon {
			pin(ReasonMultiStatement)
			onlyToken = false
			continue
		}
		if t.punct(';') {
			sawSemicolon = true
			continue
		}
		words++
		intoVars = intoVars && (t.kind == tokVar || t.punct(','))
		switch t.kind {
		case tokVar:
			st.UsesUserVar = true
			if prev.is("INTO") {
				intoVars = true
			}
			if intoVars {
				st.assignsToken = st.assignsToken || isCausalTokenVar(t.text)
			}
			if words == 1 && isCausalTokenVar(t.text) {
				continue
			}
			onlyToken = false
			if intoVars {
				st.SetsUserVar = true
				pin(ReasonUserVariable)
			}
		case tokAssign:
			onlyToken = false
			if prev.kind == tokVar {
				st.SetsUserVar = true
				st.assignsToken = st.assignsToken || isCausalTokenVar(prev.text)
				pin(ReasonUserVariable)
			}
		case tokPunct:
			if t.punct('(') && prev.kind == tokWord {
				switch {
				case prev.is("GET_LOCK"), prev.is("RELEASE_LOCK"), prev.is("RELEASE_ALL_LOCKS"),
					prev.is("IS_FREE_LOCK"), prev.is("IS_USED_LOCK"),
					prev.is("SERVICE_GET_WRITE_LOCKS"), prev.is("SERVICE_GET_READ_LOCKS"),
					prev.is("SERVICE_RELEASE_LOCKS"):
					pin(ReasonLockingFunction)
				case prev.is("LAST_INSERT_ID"), prev.is("FOUND_ROWS"), prev.is("ROW_COUNT"),
					prev.is("CONNECTION_ID"), prev.is("WAIT_FOR_EXECUTED_GTID_SET"),
					prev.is("SOURCE_POS_WAIT"), prev.is("MASTER_POS_WAIT"), prev.is("NEXTVAL"):
					pin(ReasonSessionFunction)
				}
			}
			onlyToken = false
		case tokWord:
			onlyToken = false
			switch {
			case t.is("UPDATE") && prev.is("FOR"):
				pin(ReasonLockingRead)
			case t.is("SHARE") && prev.is("FOR"):
				pin(ReasonLockingRead)
			case t.is("SHARE") && prev.is("IN"):
				pin(ReasonLockingRead) // LOCK IN SHARE MODE
			case t.is("OUTFILE") || t.is("DUMPFILE"):
				if prev.is("INTO") {
					pin(ReasonIntoFile)
				}
			case t.is("INSERT") || t.is("UPDATE") || t.is("DELETE") || t.is("REPLACE"):
				// WITH ... UPDATE/DELETE, or a write hidden in a CTE.
				pin(ReasonWrite)
			}
		default:
			onlyToken = false
		}
	}
	if onlyToken && words == 1 {
		return Stmt{Kind: KindGetToken}
	}
	return st
}

func isCausalTokenVar(v string) bool {
	name := v[1:]
	if len(name) >= 2 && (name[0] == '`' || name[0] == '\'' || name[0] == '"') && name[len(name)-1] == name[0] {
		name = name[1 : len(name)-1]
	}
	return equalFoldASCII(name, "CAUSAL_TOKEN")
}

// classifySet classifies SET statements.
func classifySet(l *lexer) Stmt {
	t := l.next()
	// SET TRANSACTION applies to the next transaction only: primary.
	if t.is("TRANSACTION") {
		return primary(ReasonTransaction)
	}
	if t.is("SESSION") || t.is("LOCAL") {
		n := l.next()
		if n.is("TRANSACTION") {
			return Stmt{Kind: KindSession} // every later transaction
		}
		t = n
	} else if t.is("GLOBAL") || t.is("PERSIST") || t.is("PERSIST_ONLY") || t.is("PASSWORD") || t.is("DEFAULT") || t.is("ROLE") || t.is("RESOURCE") {
		return primary(ReasonWrite)
	}
	// SET @causal_token = '<token>' alone.
	if t.kind == tokVar && isCausalTokenVar(t.text) {
		eq := l.next()
		v := l.next()
		end := l.next()
		if (eq.punct('=') || eq.kind == tokAssign) && v.kind == tokString && (end.kind == tokEOF || end.punct(';')) &&
			(end.kind == tokEOF || l.next().kind == tokEOF) {
			return Stmt{Kind: KindSetToken, Token: unquote(v.text), TokenForm: TokenSet}
		}
		// An expression, a subquery, a second target or statement: the
		// server would set its own @causal_token, not the session's.
		return Stmt{Kind: KindPrimary, Reason: ReasonUnclassified, assignsToken: true}
	}
	if isTrackGTIDs(t) {
		eq := l.next()
		v := l.next()
		end := l.next()
		if (eq.punct('=') || eq.kind == tokAssign) && end.kind == tokEOF {
			val := v.text
			if v.kind == tokString {
				val = unquote(val)
			}
			switch {
			case equalFoldASCII(val, "OFF"), val == "0":
				return Stmt{Kind: KindTrackGTIDs, TrackGTIDs: false}
			case equalFoldASCII(val, "OWN_GTID"), equalFoldASCII(val, "ALL_GTIDS"), val == "1", val == "2":
				return Stmt{Kind: KindTrackGTIDs, TrackGTIDs: true}
			}
		}
		return primary(ReasonUnclassified)
	}
	// Plain session SET: replayed everywhere, unless it reads data (a
	// subquery: its result could differ between servers), assigns
	// session_track_gtids among others, or sets autocommit (the primary's
	// status flags then pin the session: see session.go).
	st := Stmt{Kind: KindSession}
	var prev token
	for ; t.kind != tokEOF; prev, t = t, l.next() {
		switch {
		case t.kind == tokVar && isCausalTokenVar(t.text):
			// A later target (SET @a = 1, @causal_token = ...) is an
			// assignment the proxy would not evaluate; a use on the right
			// reads the server's variable, not the token: primary.
			st := primary(ReasonUnclassified)
			if prev.punct(',') {
				n := l.next()
				st.assignsToken = n.punct('=') || n.kind == tokAssign
			}
			return st
		case t.kind == tokVar:
			st.UsesUserVar = true
		case t.is("SELECT"):
			return Stmt{Kind: KindPrimary, Reason: ReasonUserVariable, SetsUserVar: true, UsesUserVar: true}
		case isTrackGTIDs(t):
			return primary(ReasonUnclassified)
		case t.punct(';'):
			if l.next().kind != tokEOF {
				return primary(ReasonMultiStatement)
			}
		}
	}
	return st
}

func isTrackGTIDs(t token) bool {
	switch t.kind {
	case tokWord:
		return t.is("SESSION_TRACK_GTIDS")
	case tokSysVar:
		name := t.text[2:]
		for i := 0; i < len(name); i++ {
			if name[i] == '.' {
				name = name[i+1:]
				break
			}
		}
		return equalFoldASCII(name, "SESSION_TRACK_GTIDS")
	}
	return false
}

// unquote strips the quotes of a string literal and undoes backslash and
// doubled-quote escapes. Tokens never need escapes, so this allocates only
// for literals that have them.
func unquote(s string) string {
	if len(s) < 2 {
		return ""
	}
	q := s[0]
	body := s[1 : len(s)-1]
	if s[len(s)-1] != q {
		body = s[1:]
	}
	plain := true
	for i := 0; i < len(body); i++ {
		if body[i] == '\\' || body[i] == q {
			plain = false
			break
		}
	}
	if plain {
		return body
	}
	b := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == '\\' && i+1 < len(body) {
			i++
			b = append(b, body[i])
			continue
		}
		if c == q && i+1 < len(body) && body[i+1] == q {
			i++
		}
		b = append(b, c)
	}
	return string(b)
}
