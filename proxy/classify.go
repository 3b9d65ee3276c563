package proxy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/sqllex"
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
	// KindConnStatus is `SHOW [SESSION | LOCAL] STATUS LIKE '<name>'` for
	// a status of the client's own link the proxy terminates (Ssl_cipher,
	// Ssl_version): answered by the proxy (a backend would describe its
	// link to the proxy); Stmt.Status holds the variable's name.
	KindConnStatus
	// KindProcessList is SHOW [FULL] PROCESSLIST: answered by the proxy
	// from its own sessions (Stmt.Full: FULL).
	KindProcessList
	// KindKill is KILL [QUERY | CONNECTION] <id>: carried out by the
	// proxy on its own sessions, never sent to a server (Stmt.KillID,
	// KillQuery, KillBad).
	KindKill
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
	case KindConnStatus:
		return "conn-status"
	case KindProcessList:
		return "processlist"
	case KindKill:
		return "kill"
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
	// the primary (LAST_INSERT_ID, CONNECTION_ID, waits for positions).
	ReasonSessionFunction
	// ReasonTempTable: CREATE/DROP TEMPORARY TABLE.
	ReasonTempTable
	// ReasonUserVariable: a statement that assigns user variables (:= or
	// SELECT ... INTO @v), so they exist only on the primary.
	ReasonUserVariable
	// ReasonIntoFile: SELECT ... INTO OUTFILE / DUMPFILE.
	ReasonIntoFile
	// ReasonShow: SHOW (warnings, status and the like describe the
	// connection that ran the previous statement), and EXPLAIN of a
	// SELECT (a plan is made from the server's own statistics).
	ReasonShow
	// ReasonUnclassified: the classifier did not recognise the statement
	// (or it was lexically broken); sent to the primary and counted.
	ReasonUnclassified
	// ReasonMultiStatement: more than one statement in one query.
	ReasonMultiStatement
	// ReasonPreviousStatement: the statement reads what the session's
	// previous statement left on the connection that ran it (SHOW
	// WARNINGS, SHOW ERRORS, SHOW COUNT(*) WARNINGS, @@warning_count,
	// @@error_count, FOUND_ROWS(), ROW_COUNT(), GET DIAGNOSTICS, SHOW
	// [SESSION] STATUS, information_schema.OPTIMIZER_TRACE): it runs where
	// the previous one ran (session.last), which may be a replica.
	ReasonPreviousStatement
	// ReasonServerState: a read of the server's state (@@GLOBAL.x,
	// performance_schema.global_status and global_variables, statistics):
	// a SET GLOBAL on the primary is not the replicas'.
	ReasonServerState
	// ReasonReplicaReadOnly: a read a replica refused as a write (a
	// SELECT of a stored function that writes: 1290, 1792; nothing ran
	// there), run again on the primary (session.writingRead).
	ReasonReplicaReadOnly
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
	case ReasonPreviousStatement:
		return "previous-statement"
	case ReasonServerState:
		return "server-state"
	case ReasonReplicaReadOnly:
		return "replica-read-only"
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
	// TokenParam: SET @causal_token = ?, prepared: the token is the
	// execution's parameter (Stmt.Token is empty).
	TokenParam
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
	// TrackVars: a SET of the session's session_track_system_variables,
	// which on MariaDB would stop the tracking of last_gtid the proxy
	// reads each write's GTID from (refused there: session.classify).
	TrackVars bool
	// CascadeTriggers: a SET of the session's enable_cascade_triggers,
	// which takes only on a connection never reset (multiplexed:
	// session.unresetPrimary, HoldCascadeTriggers).
	CascadeTriggers bool
	// PinsSession: the statement set session state the proxy does not
	// replay (SET NAMES in a SET whose values are evaluated): once it
	// ran, the session's reads stay on the primary (live.PinSessionState).
	PinsSession bool
	// Traces: SET optimizer_trace or profiling: the server keeps a trace
	// of each later statement on the connection (sessionState.traces).
	Traces bool
	// Eval lists the targets of a session SET with a value that is not
	// a literal (a function, a variable, a subquery, an operator): it
	// runs once, on the primary, and what it set is read back from there
	// and replayed as literals (setEval), never the expressions (nil:
	// every value is a literal, the statement is replayed as it is).
	Eval []SetTarget
	// NamedLock: a locking function (GET_LOCK and friends) is called
	// anywhere in the statement (DO, SET, INSERT ... SELECT): the
	// session may own a named lock from then on.
	NamedLock bool
	// Call: CALL, whose procedure may leave what the server does not
	// report (named locks, table locks): the session keeps its primary
	// connection from then on under multiplexing.
	Call bool
	// LastInsertID: the statement calls LAST_INSERT_ID (reads the
	// session's value, or sets it with an argument).
	LastInsertID bool
	// FromTable: a SELECT reads a table (FROM something other than
	// DUAL): what it returns is data, not only variables and functions'
	// values (Stmt.primaryRead).
	FromTable bool
	// IsNull: the statement has an IS NULL test, which under the
	// session's sql_auto_is_null finds the row of the last insert id
	// (session.autoIsNull); AutoIsNull: a SET of sql_auto_is_null.
	IsNull, AutoIsNull bool
	// DropsSchema: DROP DATABASE / DROP SCHEMA, which leaves the session
	// with no current schema when it drops that one.
	DropsSchema bool
	// HandlerOpen, HandlerClose: HANDLER ... OPEN, HANDLER ... CLOSE (the
	// open handler lives on the connection that opened it).
	HandlerOpen, HandlerClose bool
	// CalcFoundRows: SELECT SQL_CALC_FOUND_ROWS (its FOUND_ROWS() is asked
	// for by the next statement: multiplexing keeps the connection).
	CalcFoundRows bool
	// NextTransaction: SET TRANSACTION without SESSION, the next
	// transaction's characteristics (multiplexing keeps the connection
	// for the next statement, which starts it).
	NextTransaction bool
	// DiagVars are the user variables GET DIAGNOSTICS assigns, as they
	// are written, '@' included, each ended by a NUL byte (no identifier
	// holds one; a string: Stmt stays comparable).
	DiagVars string
	// Status is KindConnStatus's variable, spelt as connStatus spells it.
	Status string
	// Full: SHOW FULL PROCESSLIST (KindProcessList).
	Full bool
	// KillID is KindKill's connection id, KillQuery true for KILL QUERY;
	// KillBad: the id is not one decimal literal (refused); KillVar: the
	// id is user variable KillVar's value (KILL @id), read on the primary.
	KillID    uint64
	KillQuery bool
	KillBad   bool
	KillVar   string
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
func (a *annotations) comment(c sqllex.Comment) {
	a.block = c.Kind == sqllex.Block
	body := c.Body
	i := 0
	for i < len(body) {
		for i < len(body) && (sqllex.IsSpace(body[i]) || body[i] == ';' || body[i] == ',' || body[i] == '+') {
			i++
		}
		start := i
		for i < len(body) && !sqllex.IsSpace(body[i]) && body[i] != ';' && body[i] != ',' {
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
	case sqllex.EqualFoldUpper(key, "CAUSAL_TOKEN"):
		a.setToken(val, TokenComment)
	case sqllex.EqualFoldUpper(key, "MIN_GTID"):
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
	l := sqllex.Lexer{S: query, Comment: a.comment}
	st := classify(&l)
	// Comments after the last token are seen only by draining.
	for t := l.Next(); t.Kind != sqllex.EOF; t = l.Next() {
	}
	switch st.Kind {
	case KindRead, KindGetToken, KindTrackGTIDs:
		if l.Unterminated {
			// A lexically broken statement is neither routed nor answered
			// by the proxy: the primary refuses it with the server's own
			// error.
			st = primary(ReasonUnclassified)
		}
	}
	if a.err != nil {
		return Stmt{}, a.err
	}
	if st.assignsToken || l.Unterminated && st.Kind == KindSetToken {
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

func classify(l *sqllex.Lexer) Stmt {
	t := l.Next()
	for t.Punct('(') {
		t = l.Next()
	}
	switch {
	case t.Kind != sqllex.Word:
		return primary(ReasonUnclassified)
	case t.Is("SELECT"), t.Is("WITH"), t.Is("TABLE"), t.Is("VALUES"):
		return classifySelect(l, t)
	case t.Is("SET"):
		return classifySet(l)
	case t.Is("USE"):
		return Stmt{Kind: KindSession}
	case t.Is("BEGIN"):
		// BEGIN NOT ATOMIC is a compound statement only in stored programs.
		return Stmt{Kind: KindBegin, Reason: ReasonTransaction}
	case t.Is("START"):
		if n := l.Next(); n.Is("TRANSACTION") {
			return Stmt{Kind: KindBegin, Reason: ReasonTransaction}
		}
		return primary(ReasonWrite) // START REPLICA, START GROUP_REPLICATION...
	case t.Is("COMMIT"):
		return Stmt{Kind: KindEnd, Reason: ReasonTransaction}
	case t.Is("ROLLBACK"):
		for n := l.Next(); n.Kind != sqllex.EOF; n = l.Next() {
			if n.Is("TO") {
				return primary(ReasonTransaction) // ROLLBACK TO SAVEPOINT
			}
		}
		return Stmt{Kind: KindEnd, Reason: ReasonTransaction}
	case t.Is("SAVEPOINT"), t.Is("RELEASE"), t.Is("XA"):
		return primary(ReasonTransaction)
	case t.Is("LOCK"):
		return Stmt{Kind: KindPrimary, Reason: ReasonTransaction, LocksTables: true}
	case t.Is("UNLOCK"):
		return Stmt{Kind: KindPrimary, Reason: ReasonTransaction, UnlocksTables: true}
	case t.Is("FLUSH"):
		return classifyFlush(l)
	case t.Is("CREATE"), t.Is("DROP"):
		return classifyCreateDrop(l, t)
	case t.Is("HANDLER"):
		return classifyHandler(l)
	case t.Is("INSERT"), t.Is("UPDATE"), t.Is("DELETE"), t.Is("REPLACE"),
		t.Is("ALTER"), t.Is("TRUNCATE"), t.Is("RENAME"), t.Is("GRANT"),
		t.Is("REVOKE"), t.Is("LOAD"), t.Is("CALL"),
		t.Is("OPTIMIZE"), t.Is("ANALYZE"), t.Is("REPAIR"), t.Is("CHECK"),
		t.Is("RESET"), t.Is("PURGE"),
		t.Is("CHANGE"), t.Is("STOP"), t.Is("INSTALL"), t.Is("UNINSTALL"),
		t.Is("IMPORT"), t.Is("PREPARE"), t.Is("EXECUTE"), t.Is("DEALLOCATE"),
		t.Is("DO"), t.Is("CHECKSUM"), t.Is("CACHE"), t.Is("SHUTDOWN"),
		t.Is("RESTART"), t.Is("CLONE"):
		return classifyWrite(l, t)
	case t.Is("SHOW"):
		return classifyShow(l)
	case t.Is("GET"):
		return classifyGetDiagnostics(l)
	case t.Is("KILL"):
		return classifyKill(l)
	case t.Is("DESCRIBE"), t.Is("DESC"), t.Is("EXPLAIN"):
		// EXPLAIN ANALYZE runs the statement: only a SELECT may be routed.
		return classifyExplain(l)
	}
	return primary(ReasonUnclassified)
}

// classifyGetDiagnostics reads GET [CURRENT | STACKED] DIAGNOSTICS
// (after GET): it reads the diagnostics area of the previous statement,
// so it runs where that ran (ReasonPreviousStatement); DiagVars are the
// user variables it assigns (@v = item), which exist where it ran.
func classifyGetDiagnostics(l *sqllex.Lexer) Stmt {
	t := l.Next()
	if t.Is("CURRENT") || t.Is("STACKED") {
		t = l.Next()
	}
	if !t.Is("DIAGNOSTICS") {
		return primary(ReasonUnclassified)
	}
	st := Stmt{Kind: KindPrimary, Reason: ReasonPreviousStatement, UsesUserVar: true, SetsUserVar: true}
	var prev sqllex.Token
	for t := l.Next(); t.Kind != sqllex.EOF; prev, t = t, l.Next() {
		if t.Punct(';') && !atEnd(l) {
			return primary(ReasonMultiStatement) // the primary's, all of it
		}
		if t.Punct('=') && prev.Kind == sqllex.Var {
			st.DiagVars += prev.Text + "\x00" // a copy: Text aliases the query
		}
	}
	return st
}

// classifyCreateDrop classifies CREATE or DROP (t): TEMPORARY tables
// pin the session; DROP DATABASE / SCHEMA is told apart (DropsSchema).
func classifyCreateDrop(l *sqllex.Lexer, t sqllex.Token) Stmt {
	n := l.Next()
	if n.Is("TEMPORARY") {
		return Stmt{Kind: KindPrimary, Reason: ReasonTempTable, TempTable: true}
	}
	st := primary(ReasonWrite)
	st.DropsSchema = t.Is("DROP") && (n.Is("DATABASE") || n.Is("SCHEMA"))
	return st
}

// classifyHandler classifies HANDLER tbl_name {OPEN [[AS] alias] | READ
// ... | CLOSE} (tbl_name possibly schema-qualified): OPEN and CLOSE are
// told apart for the session's handler-open hold.
func classifyHandler(l *sqllex.Lexer) Stmt {
	st := primary(ReasonWrite)
	l.Next() // the table (or the handler's alias)
	a := l.Next()
	if a.Punct('.') {
		l.Next() // schema.table
		a = l.Next()
	}
	st.HandlerOpen, st.HandlerClose = a.Is("OPEN"), a.Is("CLOSE")
	return st
}

// connStatus are the status variables of the client's link that the
// proxy answers itself (KindConnStatus).
var connStatus = []string{"Ssl_cipher", "Ssl_version", "Compression", "Compression_algorithm", "Compression_level"}

// compressionStatus is the LIKE pattern naming the three Compression
// variables, all the client link's (KindConnStatus with Status this).
const compressionStatus = "Compression%"

// classifyShow finds KindConnStatus: SHOW [SESSION | LOCAL] STATUS LIKE
// with a literal naming one of connStatus exactly (case-insensitive, `\_`
// or `_` for the underscore, no other wildcard), or compressionStatus. Any other SHOW stays on
// the primary.
func classifyShow(l *sqllex.Lexer) Stmt {
	t := l.Next()
	if t.Is("WARNINGS") || t.Is("ERRORS") || t.Is("COUNT") {
		// SHOW WARNINGS [LIMIT ...], SHOW ERRORS, SHOW COUNT(*) WARNINGS
		return primary(ReasonPreviousStatement)
	}
	if st, ok := classifyProcessList(l, t); ok {
		return st
	}
	if t.Is("SESSION") || t.Is("LOCAL") {
		t = l.Next()
	}
	if !t.Is("STATUS") {
		return primary(ReasonShow)
	}
	return classifySessionStatus(l)
}

// classifySessionStatus classifies SHOW [SESSION | LOCAL] STATUS [LIKE
// ... | WHERE ...] (after STATUS): the session's counters
// (Last_query_cost, Handler_*) are the connection's that ran the
// previous statement, so it runs there; a LIKE naming one of connStatus
// is the proxy's (KindConnStatus); a second statement sends it all to the
// primary.
func classifySessionStatus(l *sqllex.Lexer) Stmt {
	var rest [2]sqllex.Token
	n := 0
	for t := l.Next(); t.Kind != sqllex.EOF; t = l.Next() {
		if t.Punct(';') {
			if !atEnd(l) {
				return primary(ReasonMultiStatement)
			}
			break
		}
		if n < len(rest) {
			rest[n] = t
		}
		n++
	}
	if n == 2 && rest[0].Is("LIKE") && rest[1].Kind == sqllex.String {
		pat := strings.ReplaceAll(unquote(rest[1].Text), `\_`, "_")
		if strings.EqualFold(pat, compressionStatus) {
			return Stmt{Kind: KindConnStatus, Status: compressionStatus}
		}
		for _, name := range connStatus {
			if strings.EqualFold(pat, name) {
				return Stmt{Kind: KindConnStatus, Status: name}
			}
		}
	}
	return primary(ReasonPreviousStatement)
}

// classifyProcessList finds KindProcessList after SHOW (t is the next
// word): [FULL] PROCESSLIST, alone.
func classifyProcessList(l *sqllex.Lexer, t sqllex.Token) (Stmt, bool) {
	st := Stmt{Kind: KindProcessList}
	if t.Is("FULL") {
		st.Full = true
		t = l.Next()
	}
	if !t.Is("PROCESSLIST") || !atEnd(l) {
		return Stmt{}, false
	}
	return st, true
}

// atEnd: nothing but an optional ';' is left of the statement.
func atEnd(l *sqllex.Lexer) bool {
	n := l.Next()
	if n.Punct(';') {
		n = l.Next()
	}
	return n.Kind == sqllex.EOF && !l.Unterminated
}

// classifyKill reads KILL [QUERY | CONNECTION] <id>, the id one decimal
// literal, CAST(<literal> AS UNSIGNED) (what CONNECTION_ID() became:
// withConnectionID) or one user variable (KillVar). Anything else is
// KillBad: refused, never sent.
func classifyKill(l *sqllex.Lexer) Stmt {
	st := Stmt{Kind: KindKill}
	t := l.Next()
	switch {
	case t.Is("QUERY"):
		st.KillQuery = true
		t = l.Next()
	case t.Is("CONNECTION"):
		t = l.Next()
	}
	if t.Is("CAST") {
		if !l.Next().Punct('(') {
			st.KillBad = true
			return st
		}
		t = l.Next()
		if !l.Next().Is("AS") || !l.Next().Is("UNSIGNED") || !l.Next().Punct(')') {
			st.KillBad = true
			return st
		}
	}
	if t.Kind == sqllex.Var && !strings.HasPrefix(t.Text, "@@") && atEnd(l) {
		st.KillVar = strings.Clone(t.Text) // Text aliases the query
		return st
	}
	id, ok := decimalID(t)
	if !ok || !atEnd(l) {
		st.KillBad = true
		return st
	}
	st.KillID = id
	return st
}

// decimalID is t's value when it is a decimal literal of at most 20
// digits (a processlist id is 64 bits in MySQL).
func decimalID(t sqllex.Token) (uint64, bool) {
	if t.Kind != sqllex.Word || len(t.Text) == 0 || len(t.Text) > 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(t.Text); i++ {
		c := t.Text[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// classifyFlush classifies FLUSH (after FLUSH): an administrative write.
// FLUSH TABLES ... WITH READ LOCK and FLUSH TABLES ... FOR EXPORT take
// table locks (held until UNLOCK TABLES, as LOCK TABLES'); FLUSH STATUS
// resets the session's counters on the primary only, so the session's
// reads stay there from then on (PinsSession): SHOW STATUS then counts
// every statement the session ran since.
func classifyFlush(l *sqllex.Lexer) Stmt {
	st := primary(ReasonWrite)
	var prev sqllex.Token
	for t := l.Next(); t.Kind != sqllex.EOF; prev, t = t, l.Next() {
		if t.Is("LOCK") && prev.Is("READ") || t.Is("EXPORT") && prev.Is("FOR") {
			st.LocksTables = true
		}
		if t.Is("STATUS") {
			st.PinsSession = true
		}
	}
	return st
}

// isLockFunction: fn, a word before '(', is a locking function (the
// session may own a named lock after it ran).
func isLockFunction(fn sqllex.Token) bool {
	return fn.Is("GET_LOCK") || fn.Is("RELEASE_LOCK") || fn.Is("RELEASE_ALL_LOCKS") ||
		fn.Is("IS_FREE_LOCK") || fn.Is("IS_USED_LOCK") ||
		fn.Is("SERVICE_GET_WRITE_LOCKS") || fn.Is("SERVICE_GET_READ_LOCKS") ||
		fn.Is("SERVICE_RELEASE_LOCKS")
}

// classifyWrite is a write (or CALL, ...) beginning with t.
func classifyWrite(l *sqllex.Lexer, t sqllex.Token) Stmt {
	st := primary(ReasonWrite)
	st.Call = t.Is("CALL")
	scanUserVars(l, &st)
	// CALL p(@v): an OUT or INOUT parameter sets @v on the primary, and
	// MySQL does not always report it as a state change (main.sp-big:
	// an OUT assigned by SELECT ... INTO).
	st.SetsUserVar = st.SetsUserVar || st.Call && st.UsesUserVar
	return st
}

// scanUserVars marks a write that assigns user variables or calls a
// locking function.
func scanUserVars(l *sqllex.Lexer, st *Stmt) {
	var prev sqllex.Token
	for t := l.Next(); t.Kind != sqllex.EOF; t = l.Next() {
		if t.Kind == sqllex.Var {
			st.UsesUserVar = true
		}
		if t.Punct('(') && isLockFunction(prev) {
			st.NamedLock = true
		}
		if t.Punct('(') && prev.Is("LAST_INSERT_ID") {
			st.LastInsertID = true
		}
		if t.Is("NULL") && prev.Is("IS") {
			st.IsNull = true
		}
		if t.Kind == sqllex.Assign && prev.Kind == sqllex.Var {
			st.SetsUserVar = true
			st.assignsToken = st.assignsToken || isCausalTokenVar(prev.Text)
		}
		if t.Is("INTO") {
			if n := l.Next(); n.Kind == sqllex.Var {
				st.SetsUserVar, st.UsesUserVar = true, true
				st.assignsToken = st.assignsToken || isCausalTokenVar(n.Text)
			}
		}
		prev = t
	}
}

func classifyExplain(l *sqllex.Lexer) Stmt {
	for t := l.Next(); t.Kind != sqllex.EOF; t = l.Next() {
		switch {
		case t.Is("SELECT"), t.Is("WITH"), t.Is("TABLE"):
			st := classifySelect(l, t)
			if st.Kind == KindGetToken {
				return primary(ReasonUnclassified)
			}
			// A plan is made from the server's own statistics and
			// histograms, which are not replicated (ANALYZE TABLE ...
			// UPDATE HISTOGRAM leaves replicas without one): the
			// primary's plan is the session's server's, as direct.
			pinRead(&st, ReasonShow)
			return st
		case t.Is("ANALYZE"), t.Is("FORMAT"), t.Is("EXTENDED"), t.Is("PARTITIONS"),
			t.Is("TREE"), t.Is("JSON"), t.Is("TRADITIONAL"), t.Punct('='):
			continue // EXPLAIN's options
		case t.Is("INTO"):
			// EXPLAIN FORMAT=JSON INTO @v ...: the plan is set into a
			// user variable, which then lives on the primary.
			if l.Next().Kind != sqllex.Var {
				return primary(ReasonUnclassified)
			}
			return Stmt{Kind: KindPrimary, Reason: ReasonUserVariable, SetsUserVar: true, UsesUserVar: true}
		case t.Kind == sqllex.Word:
			return classifyDescribe(l, t)
		case t.Kind == sqllex.Ident:
			return Stmt{Kind: KindRead}
		default:
			return primary(ReasonUnclassified)
		}
	}
	return primary(ReasonUnclassified)
}

// classifyDescribe classifies what follows EXPLAIN or DESCRIBE when it is
// a word t other than SELECT's: DESCRIBE tbl [col] is a metadata read,
// routable; EXPLAIN of a write stays on the primary.
func classifyDescribe(l *sqllex.Lexer, t sqllex.Token) Stmt {
	n := l.Next()
	if n.Kind != sqllex.EOF && n.Kind != sqllex.Word && n.Kind != sqllex.Ident && !n.Punct('.') && n.Kind != sqllex.String {
		return primary(ReasonUnclassified)
	}
	if n.Kind == sqllex.EOF {
		return Stmt{Kind: KindRead}
	}
	for m := l.Next(); m.Kind != sqllex.EOF; m = l.Next() {
		if m.Is("INSERT") || m.Is("UPDATE") || m.Is("DELETE") || m.Is("REPLACE") {
			return primary(ReasonWrite)
		}
	}
	if t.Is("INSERT") || t.Is("UPDATE") || t.Is("DELETE") || t.Is("REPLACE") || t.Is("FOR") {
		return primary(ReasonWrite)
	}
	return Stmt{Kind: KindRead}
}

// classifySelect scans a SELECT (or WITH/TABLE/VALUES) to its end. Every
// routed read passes here, so the loop decides the keywords itself (a
// call per word would cost more than the words' tests); user variables,
// assignments and function calls are selectVar's, selectAssign's and
// selectCall's to decide, the statement's kind selectResult's.
func classifySelect(l *sqllex.Lexer, first sqllex.Token) Stmt {
	st := Stmt{Kind: KindRead}
	var prev sqllex.Token
	words := 0
	onlyToken := first.Is("SELECT")
	sawSemicolon := false
	intoVars := false   // inside SELECT ... INTO @a, @b
	previous := false   // reads what the previous statement left (FOUND_ROWS, @@warning_count)
	infoSchema := false // INFORMATION_SCHEMA was named
	for t := l.Next(); t.Kind != sqllex.EOF; prev, t = t, l.Next() {
		if sawSemicolon {
			pinRead(&st, ReasonMultiStatement)
			onlyToken = false
			continue
		}
		if t.Punct(';') {
			sawSemicolon = true
			continue
		}
		words++
		st.FromTable = st.FromTable || fromTable(prev, t)
		intoVars = intoVars && (t.Kind == sqllex.Var || t.Punct(','))
		if t.Kind == sqllex.Var {
			var keep bool
			intoVars, keep = selectVar(&st, t, prev, words, intoVars)
			onlyToken = onlyToken && keep
			continue
		}
		onlyToken = false
		switch t.Kind {
		case sqllex.SysVar:
			if readsPreviousSysVar(t) {
				previous = true
			} else if isGlobalSysVar(t) {
				pinRead(&st, ReasonServerState)
			}
		case sqllex.Assign:
			selectAssign(&st, prev)
		case sqllex.Punct:
			if t.Punct('(') && selectCall(&st, prev) {
				previous = true
			}
		case sqllex.Word:
			previous = selectWord(&st, t, prev, &infoSchema) || previous
		}
	}
	return selectResult(st, onlyToken && words == 1, previous)
}

// selectWhere decides a SELECT's word t (after prev) that names where
// its answer lives: INTO OUTFILE / DUMPFILE (the primary's files), the
// previous statement's trace or counters (information_schema's
// OPTIMIZER_TRACE, performance_schema's session_status: previous), the
// server's own state (global_status, global_variables, the processlist,
// the server logs, histograms, information_schema's EVENTS: the
// primary). infoSchema records that INFORMATION_SCHEMA was named (an
// EVENTS table elsewhere is the application's).
func selectWhere(st *Stmt, t, prev sqllex.Token, infoSchema *bool) (previous bool) {
	switch {
	case t.Is("INFORMATION_SCHEMA"):
		*infoSchema = true
	case t.Is("EVENTS"), t.Is("PARTITIONS"), t.Is("STATISTICS"), t.Is("FILES"), isInnoDBTable(t):
		// An event's status is the primary's: a replica shows the
		// events it replicated as SLAVESIDE_DISABLED. Partition and
		// index statistics (TABLE_ROWS, CARDINALITY) are each
		// server's own estimates, as a plan's (main.partition_datatype).
		// FILES and INNODB_* describe the server's own files, buffer
		// pool, transactions and temporary tables: an undo tablespace
		// created on the primary exists there only (main.undo_tablespace).
		if *infoSchema {
			pinRead(st, ReasonServerState)
		}
	case t.Is("OUTFILE"), t.Is("DUMPFILE"):
		if prev.Is("INTO") {
			pinRead(st, ReasonIntoFile)
		}
	case t.Is("GLOBAL_STATUS"), t.Is("GLOBAL_VARIABLES"), t.Is("PROCESSLIST"),
		t.Is("SLOW_LOG"), t.Is("GENERAL_LOG"), t.Is("COLUMN_STATISTICS"):
		// PROCESSLIST (information_schema's, performance_schema's):
		// the threads of the server the sessions' statements and
		// locks run on; mysql.slow_log and general_log: the log of
		// them; COLUMN_STATISTICS: histograms, which are not
		// replicated; the primary's.
		pinRead(st, ReasonServerState)
	default:
		return true
	}
	return false
}

// isInnoDBTable: t names one of information_schema's INNODB_* tables.
func isInnoDBTable(t sqllex.Token) bool {
	return t.Kind == sqllex.Word && len(t.Text) > 7 && strings.EqualFold(t.Text[:7], "INNODB_")
}

// pinRead sends a read to the primary for r.
func pinRead(st *Stmt, r Reason) {
	// The first pinning reason wins; later ones are the same outcome.
	if st.Kind == KindRead {
		st.Kind, st.Reason = KindPrimary, r
	}
}

// selectResult is a scanned SELECT's classification: onlyToken, it was
// SELECT @causal_token alone; previous, it reads what the previous
// statement left.
func selectResult(st Stmt, onlyToken, previous bool) Stmt {
	if onlyToken {
		return Stmt{Kind: KindGetToken}
	}
	// Any other reason to stay on the primary wins over following the
	// previous statement.
	if previous && st.Kind == KindRead {
		st.Kind, st.Reason = KindPrimary, ReasonPreviousStatement
	}
	return st
}

// selectVar reads user variable t of a SELECT, its words-th token, after
// prev: a use, or a target of SELECT ... INTO @a, @b (intoVars: inside
// that list before t). It returns whether t is in that list, and keep:
// t may be SELECT @causal_token's.
func selectVar(st *Stmt, t, prev sqllex.Token, words int, intoVars bool) (into, keep bool) {
	st.UsesUserVar = true
	if prev.Is("INTO") {
		intoVars = true
	}
	if intoVars {
		st.assignsToken = st.assignsToken || isCausalTokenVar(t.Text)
	}
	if words == 1 && isCausalTokenVar(t.Text) {
		return intoVars, true
	}
	if intoVars {
		st.SetsUserVar = true
		pinRead(st, ReasonUserVariable)
	}
	return intoVars, false
}

// selectAssign reads a := after prev: the assignment of a user variable
// pins the statement.
func selectAssign(st *Stmt, prev sqllex.Token) {
	if prev.Kind == sqllex.Var {
		st.SetsUserVar = true
		st.assignsToken = st.assignsToken || isCausalTokenVar(prev.Text)
		pinRead(st, ReasonUserVariable)
	}
}

// fromTable: t, after prev, begins what a SELECT reads from that is not
// DUAL (a table, a subquery, a table function).
func fromTable(prev, t sqllex.Token) bool { return prev.Is("FROM") && !t.Is("DUAL") }

// selectWord reads word t of a SELECT (prev the token before it); it
// reports a read of what the previous statement left.
func selectWord(st *Stmt, t, prev sqllex.Token, infoSchema *bool) (previous bool) {
	switch {
	case t.Is("UPDATE") && prev.Is("FOR"), t.Is("SHARE") && (prev.Is("FOR") || prev.Is("IN")):
		pinRead(st, ReasonLockingRead) // FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE
	case t.Is("NULL") && prev.Is("IS"):
		st.IsNull = true
	case t.Is("SQL_CALC_FOUND_ROWS"):
		// Its FOUND_ROWS() would be spoilt on a replica by the
		// watermark read the proxy runs there right after it.
		pinRead(st, ReasonSessionFunction)
		st.CalcFoundRows = true
	case t.Is("INSERT"), t.Is("UPDATE"), t.Is("DELETE"), t.Is("REPLACE"):
		// WITH ... UPDATE/DELETE, or a write hidden in a CTE.
		pinRead(st, ReasonWrite)
	case t.Is("OUTFILE"), t.Is("DUMPFILE"), t.Is("OPTIMIZER_TRACE"), t.Is("SESSION_STATUS"),
		t.Is("PROFILING"), t.Is("GLOBAL_STATUS"), t.Is("GLOBAL_VARIABLES"), t.Is("PROCESSLIST"),
		t.Is("SLOW_LOG"), t.Is("GENERAL_LOG"), t.Is("COLUMN_STATISTICS"),
		t.Is("INFORMATION_SCHEMA"), t.Is("EVENTS"), t.Is("PARTITIONS"), t.Is("STATISTICS"),
		t.Is("FILES"), isInnoDBTable(t):
		return selectWhere(st, t, prev, infoSchema)
	}
	return false
}

// selectCall reads the '(' after fn, a call when fn is a word: locking
// and session functions pin the statement. It reports a function that
// reads what the previous statement left.
func selectCall(st *Stmt, fn sqllex.Token) (previous bool) {
	switch {
	case isLockFunction(fn):
		pinRead(st, ReasonLockingFunction)
		st.NamedLock = true
	case fn.Is("FOUND_ROWS"), fn.Is("ROW_COUNT"):
		return true
	case fn.Is("LAST_INSERT_ID"):
		st.LastInsertID = true
		pinRead(st, ReasonSessionFunction)
	case fn.Is("CONNECTION_ID"), fn.Is("WAIT_FOR_EXECUTED_GTID_SET"),
		fn.Is("SOURCE_POS_WAIT"), fn.Is("MASTER_POS_WAIT"), fn.Is("NEXTVAL"):
		pinRead(st, ReasonSessionFunction)
	}
	return false
}

// isGlobalSysVar: system variable t is read in global scope
// (@@GLOBAL.x).
func isGlobalSysVar(t sqllex.Token) bool {
	return len(t.Text) > 9 && sqllex.EqualFoldUpper(t.Text[2:9], "GLOBAL.")
}

// readsPreviousSysVar: system variable t is @@warning_count or
// @@error_count, what the previous statement left.
func readsPreviousSysVar(t sqllex.Token) bool {
	n := sysVarName(t)
	return sqllex.EqualFoldUpper(n, "WARNING_COUNT") || sqllex.EqualFoldUpper(n, "ERROR_COUNT")
}

func isCausalTokenVar(v string) bool {
	name := v[1:]
	if len(name) >= 2 && (name[0] == '`' || name[0] == '\'' || name[0] == '"') && name[len(name)-1] == name[0] {
		name = name[1 : len(name)-1]
	}
	return sqllex.EqualFoldUpper(name, "CAUSAL_TOKEN")
}

// classifySet classifies SET statements: by their scope, then as SET
// @causal_token, SET session_track_gtids or another session SET.
func classifySet(l *sqllex.Lexer) Stmt {
	t := l.Next()
	// SET TRANSACTION applies to the next transaction only: primary.
	if t.Is("TRANSACTION") {
		st := primary(ReasonTransaction)
		st.NextTransaction = true
		return st
	}
	if t.Is("SESSION") || t.Is("LOCAL") {
		n := l.Next()
		if n.Is("TRANSACTION") {
			return Stmt{Kind: KindSession} // every later transaction
		}
		t = n
	} else if t.Is("PASSWORD") || t.Is("DEFAULT") || t.Is("ROLE") || t.Is("RESOURCE") {
		return primary(ReasonWrite)
	} else if t.Is("GLOBAL") || t.Is("PERSIST") || t.Is("PERSIST_ONLY") {
		// Global alone: a write; with a session part after it
		// (SESSION y = ..., @@y = ...): run once where the session stays.
		return classifySetSession(l, t)
	}
	switch {
	case t.Kind == sqllex.Var && isCausalTokenVar(t.Text):
		// SET @causal_token = '<token>' alone.
		return classifySetToken(l)
	case isTrackGTIDs(t):
		return classifySetTrackGTIDs(l)
	case t.Kind != sqllex.Var && (sqllex.EqualFoldUpper(sysVarName(sqllex.Token{Text: "@@" + t.Text}), "OPTIMIZER_TRACE") ||
		sqllex.EqualFoldUpper(sysVarName(sqllex.Token{Text: "@@" + t.Text}), "PROFILING")):
		// The trace (SHOW PROFILES) is the connection's that ran the
		// statements: the session's reads stay on the primary, whole there.
		st := classifySetSession(l, t)
		st.PinsSession = st.Kind == KindSession
		st.Traces = st.PinsSession
		return st
	}
	return classifySetSession(l, t)
}

// classifySetToken classifies SET @causal_token after the variable:
// KindSetToken for one string literal, or one parameter marker, alone.
func classifySetToken(l *sqllex.Lexer) Stmt {
	eq := l.Next()
	v := l.Next()
	end := l.Next()
	alone := (eq.Punct('=') || eq.Kind == sqllex.Assign) && (end.Kind == sqllex.EOF || end.Punct(';')) &&
		(end.Kind == sqllex.EOF || l.Next().Kind == sqllex.EOF)
	switch {
	case alone && v.Kind == sqllex.String:
		return Stmt{Kind: KindSetToken, Token: unquote(v.Text), TokenForm: TokenSet}
	case alone && v.Punct('?'):
		// A prepared statement's parameter: the token arrives as data.
		return Stmt{Kind: KindSetToken, TokenForm: TokenParam}
	}
	// An expression, a subquery, a second target or statement: the
	// server would set its own @causal_token, not the session's.
	return Stmt{Kind: KindPrimary, Reason: ReasonUnclassified, assignsToken: true}
}

// classifySetTrackGTIDs classifies SET session_track_gtids after the
// variable: KindTrackGTIDs for a value alone the proxy knows.
func classifySetTrackGTIDs(l *sqllex.Lexer) Stmt {
	eq := l.Next()
	v := l.Next()
	end := l.Next()
	if (eq.Punct('=') || eq.Kind == sqllex.Assign) && end.Kind == sqllex.EOF {
		val := v.Text
		if v.Kind == sqllex.String {
			val = unquote(val)
		}
		switch {
		case sqllex.EqualFoldUpper(val, "OFF"), val == "0":
			return Stmt{Kind: KindTrackGTIDs, TrackGTIDs: false}
		case sqllex.EqualFoldUpper(val, "OWN_GTID"), sqllex.EqualFoldUpper(val, "ALL_GTIDS"), val == "1", val == "2":
			return Stmt{Kind: KindTrackGTIDs, TrackGTIDs: true}
		}
	}
	return primary(ReasonUnclassified)
}

// classifySetSession classifies a plain session SET from its first
// target t (setParser): replayed everywhere as it is when every value is
// a literal; evaluated once when one is not (Stmt.Eval); a SET of a
// global scope, of session_track_gtids among others, or followed by a
// second statement stays on the primary.
func classifySetSession(l *sqllex.Lexer, t sqllex.Token) Stmt {
	p := setParser{l: l}
	for ; t.Kind != sqllex.EOF; t = l.Next() {
		if st, done := p.token(t); done {
			return st
		}
	}
	return p.finish()
}

func isTrackGTIDs(t sqllex.Token) bool {
	switch t.Kind {
	case sqllex.Word:
		return t.Is("SESSION_TRACK_GTIDS")
	case sqllex.SysVar:
		return sqllex.EqualFoldUpper(sysVarName(t), "SESSION_TRACK_GTIDS")
	}
	return false
}

// sysVarName is a system variable token's name without @@ and its scope
// (@@SESSION.x, @@GLOBAL.x).
func sysVarName(t sqllex.Token) string {
	name := t.Text[2:]
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			return name[i+1:]
		}
	}
	return name
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

// MultiEffects is what the statements of a multi-statement query (a
// COM_QUERY with CLIENT_MULTI_STATEMENTS) leave in the session beyond
// writes, which the proxy cannot replay on replicas piece by piece: the
// query runs on the primary as one command.
type MultiEffects struct {
	// Session: a piece changes session state (SET, USE, SET NAMES,
	// session_track_gtids, @causal_token) or could not be classified
	// (a broken annotation).
	Session bool
	// TempTable, LocksTables, UnlocksTables, SetsUserVar: as Stmt's, for
	// any piece.
	TempTable, LocksTables, UnlocksTables, SetsUserVar bool
}

// ClassifyMulti splits query at its top-level semicolons (quotes,
// comments and executable comments understood by the lexer) and
// classifies each piece. ok is false for a query of one statement. A
// semicolon inside a stored program's body splits it too: its SETs then
// count as session statements, which pins more than needed, never less.
func ClassifyMulti(query string) (e MultiEffects, ok bool) {
	l := sqllex.Lexer{S: query}
	start, pieces := 0, 0
	piece := func(end int) {
		text := query[start:end]
		start = end + 1
		if strings.TrimSpace(text) == "" {
			return
		}
		pieces++
		st, err := Classify(text)
		if err != nil {
			e.Session = true
			return
		}
		switch st.Kind {
		case KindSession, KindSetToken, KindGetToken, KindTrackGTIDs:
			e.Session = true
		}
		e.TempTable = e.TempTable || st.TempTable
		e.LocksTables = e.LocksTables || st.LocksTables
		e.UnlocksTables = e.UnlocksTables || st.UnlocksTables
		e.SetsUserVar = e.SetsUserVar || st.SetsUserVar
	}
	for t := l.Next(); t.Kind != sqllex.EOF; t = l.Next() {
		if t.Punct(';') {
			piece(t.Pos)
		}
	}
	if start < len(query) {
		piece(len(query))
	}
	if pieces < 2 {
		return MultiEffects{}, false
	}
	return e, true
}
