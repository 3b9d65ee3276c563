package proxy

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		q      string
		kind   Kind
		reason Reason
	}{
		// Routable reads.
		{"SELECT 1", KindRead, ReasonNone},
		{"  select c from sbtest1 where id=10", KindRead, ReasonNone},
		{"(SELECT a FROM t) UNION (SELECT b FROM u)", KindRead, ReasonNone},
		{"WITH x AS (SELECT 1) SELECT * FROM x", KindRead, ReasonNone},
		{"TABLE t", KindRead, ReasonNone},
		{"SELECT 'for update' FROM t", KindRead, ReasonNone},
		{"SELECT `update` FROM t", KindRead, ReasonNone},
		{"SELECT * FROM t -- FOR UPDATE", KindRead, ReasonNone},
		{"SELECT * FROM t # FOR UPDATE", KindRead, ReasonNone},
		{"SELECT * FROM t /* FOR UPDATE */", KindRead, ReasonNone},
		{"SELECT @a", KindRead, ReasonNone},
		{"SELECT sleep(0)", KindRead, ReasonNone},
		{"DESCRIBE t", KindRead, ReasonNone},
		{"EXPLAIN SELECT * FROM t", KindPrimary, ReasonShow},
		{"SELECT 1;", KindRead, ReasonNone},
		// Locking reads and functions.
		{"SELECT * FROM t WHERE id=1 FOR UPDATE", KindPrimary, ReasonLockingRead},
		{"select * from t for share", KindPrimary, ReasonLockingRead},
		{"SELECT * FROM t LOCK IN SHARE MODE", KindPrimary, ReasonLockingRead},
		{"SELECT * FROM t /*!80000 FOR UPDATE */", KindPrimary, ReasonLockingRead},
		{"SELECT GET_LOCK('x', 1)", KindPrimary, ReasonLockingFunction},
		{"select release_lock ('x')", KindPrimary, ReasonLockingFunction},
		{"SELECT IS_FREE_LOCK('x')", KindPrimary, ReasonLockingFunction},
		{"SELECT LAST_INSERT_ID()", KindPrimary, ReasonSessionFunction},
		{"SELECT FOUND_ROWS()", KindPrimary, ReasonPreviousStatement},
		{"SELECT ROW_COUNT()", KindPrimary, ReasonPreviousStatement},
		{"SELECT @@warning_count, @@SESSION.error_count", KindPrimary, ReasonPreviousStatement},
		{"SELECT FOUND_ROWS(), LAST_INSERT_ID()", KindPrimary, ReasonSessionFunction},
		{"SELECT FOUND_ROWS() FOR UPDATE", KindPrimary, ReasonLockingRead},
		{"SHOW ERRORS", KindPrimary, ReasonPreviousStatement},
		{"SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1", KindPrimary, ReasonSessionFunction},
		{"SHOW COUNT(*) WARNINGS", KindPrimary, ReasonPreviousStatement},
		{"SELECT * INTO OUTFILE '/tmp/x' FROM t", KindPrimary, ReasonIntoFile},
		{"SELECT @a := 1", KindPrimary, ReasonUserVariable},
		{"SELECT c INTO @v FROM t", KindPrimary, ReasonUserVariable},
		{"WITH x AS (SELECT 1) UPDATE t SET a=1", KindPrimary, ReasonWrite},
		{"EXPLAIN ANALYZE SELECT * FROM t FOR UPDATE", KindPrimary, ReasonLockingRead},
		{"EXPLAIN UPDATE t SET a=1", KindPrimary, ReasonWrite},
		{"SELECT 1; SELECT 2", KindPrimary, ReasonMultiStatement},
		{"SELECT 'unterminated", KindPrimary, ReasonUnclassified},
		{"SELECT 1 /* unterminated", KindPrimary, ReasonUnclassified},
		// Writes.
		{"INSERT INTO t VALUES (1)", KindPrimary, ReasonWrite},
		{"update t set a=1", KindPrimary, ReasonWrite},
		{"DELETE FROM t", KindPrimary, ReasonWrite},
		{"REPLACE INTO t VALUES (1)", KindPrimary, ReasonWrite},
		{"CREATE TABLE t (a int)", KindPrimary, ReasonWrite},
		{"ALTER TABLE t ADD b int", KindPrimary, ReasonWrite},
		{"CALL p()", KindPrimary, ReasonWrite},
		{"DO GET_LOCK('a', 1)", KindPrimary, ReasonWrite},
		{"CREATE TEMPORARY TABLE x (a int)", KindPrimary, ReasonTempTable},
		{"drop temporary table x", KindPrimary, ReasonTempTable},
		{"SHOW WARNINGS", KindPrimary, ReasonPreviousStatement},
		{"GET DIAGNOSTICS @n = NUMBER", KindPrimary, ReasonPreviousStatement},
		{"get stacked diagnostics condition 1 @m = MESSAGE_TEXT", KindPrimary, ReasonPreviousStatement},
		{"GET LOST", KindPrimary, ReasonUnclassified},
		{"GET DIAGNOSTICS @n = NUMBER;", KindPrimary, ReasonPreviousStatement},
		{"GET DIAGNOSTICS @n = NUMBER; INSERT INTO t VALUES (1)", KindPrimary, ReasonMultiStatement},
		{"SELECT @@GLOBAL.max_connections", KindPrimary, ReasonServerState},
		{"SELECT @@global.read_only, @@session.sql_mode", KindPrimary, ReasonServerState},
		{"SELECT @@max_connections", KindRead, ReasonNone},
		{"SELECT * FROM performance_schema.global_variables", KindPrimary, ReasonServerState},
		{"SELECT COUNT(*) = 0 FROM information_schema.processlist WHERE user = 'event_scheduler'", KindPrimary, ReasonServerState},
		{"SELECT ID FROM performance_schema.PROCESSLIST", KindPrimary, ReasonServerState},
		{"SELECT sql_text, rows_examined FROM mysql.slow_log", KindPrimary, ReasonServerState},
		{"SELECT histogram FROM information_schema.COLUMN_STATISTICS", KindPrimary, ReasonServerState},
		{"EXPLAIN FORMAT=JSON INTO @v SELECT 1", KindPrimary, ReasonUserVariable},
		{"select count(*) = 1 from information_schema.events where event_name='e2' and status='DISABLED'", KindPrimary, ReasonServerState},
		{"SELECT * FROM app.events WHERE id = 1", KindRead, ReasonNone},
		{"SELECT PARTITION_NAME, TABLE_ROWS FROM INFORMATION_SCHEMA.PARTITIONS WHERE TABLE_NAME = 't2'", KindPrimary, ReasonServerState},
		{"select cardinality from information_schema.statistics where table_name = 't'", KindPrimary, ReasonServerState},
		{"SELECT * FROM app.statistics, app.partitions", KindRead, ReasonNone},
		{"SELECT * FROM performance_schema.session_status", KindPrimary, ReasonPreviousStatement},
		{"SELECT * FROM information_schema.OPTIMIZER_TRACE", KindPrimary, ReasonPreviousStatement},
		{"SELECT * FROM information_schema.PROFILING", KindPrimary, ReasonPreviousStatement},
		{"SELECT SPACE_TYPE, STATE FROM information_schema.INNODB_TABLESPACES WHERE NAME = 'undo_003'", KindPrimary, ReasonServerState},
		{"SELECT FILE_NAME FROM information_schema.FILES WHERE FILE_TYPE = 'UNDO LOG'", KindPrimary, ReasonServerState},
		{"SELECT * FROM app.files, app.innodb_x", KindRead, ReasonNone},
		{"SELECT * FROM t FOR UPDATE", KindPrimary, ReasonLockingRead},
		{"SELECT * FROM t FOR SHARE", KindPrimary, ReasonLockingRead},
		{"SELECT * FROM t LOCK IN SHARE MODE", KindPrimary, ReasonLockingRead},
		{"SHOW GLOBAL VARIABLES LIKE 'x'", KindPrimary, ReasonShow},
		{"SHOW VARIABLES", KindPrimary, ReasonShow},
		{"FLUSH STATUS", KindPrimary, ReasonWrite},
		{"FLUSH TABLES", KindPrimary, ReasonWrite},
		{"SHOW SESSION STATUS LIKE 'Last_query_cost'", KindPrimary, ReasonPreviousStatement},
		{"SHOW TABLES", KindPrimary, ReasonShow},
		// Transactions.
		{"BEGIN", KindBegin, ReasonTransaction},
		{"START TRANSACTION READ ONLY", KindBegin, ReasonTransaction},
		{"COMMIT", KindEnd, ReasonTransaction},
		{"ROLLBACK", KindEnd, ReasonTransaction},
		{"ROLLBACK TO SAVEPOINT a", KindPrimary, ReasonTransaction},
		{"SAVEPOINT a", KindPrimary, ReasonTransaction},
		{"XA START 'x'", KindPrimary, ReasonTransaction},
		{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", KindPrimary, ReasonTransaction},
		{"LOCK TABLES t READ", KindPrimary, ReasonTransaction},
		// Session settings.
		{"SET NAMES utf8mb4", KindSession, ReasonNone},
		{"SET autocommit=0", KindSession, ReasonNone},
		{"SET @a = 1", KindSession, ReasonNone},
		{"SET SESSION sql_mode = ''", KindSession, ReasonNone},
		{"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", KindSession, ReasonNone},
		{"USE db", KindSession, ReasonNone},
		{"SET @a = (SELECT max(id) FROM t)", KindSession, ReasonNone}, // evaluated once
		{"SET @@GLOBAL.x = 1", KindPrimary, ReasonWrite},
		{"FLUSH TABLES WITH READ LOCK", KindPrimary, ReasonWrite},
		{"SET GLOBAL x = 1", KindPrimary, ReasonWrite},
		// Proxy-answered.
		{"SET @causal_token = ''", KindSetToken, ReasonNone}, // clears the session's token
		{"SET @causal_token = 'abc'", KindSetToken, ReasonNone},
		{"set @`causal_token`='abc';", KindSetToken, ReasonNone},
		{"SELECT @causal_token", KindGetToken, ReasonNone},
		{"select @CAUSAL_TOKEN ;", KindGetToken, ReasonNone},
		{"SET session_track_gtids = OWN_GTID", KindTrackGTIDs, ReasonNone},
		{"SET @@session.session_track_gtids = 'OFF'", KindTrackGTIDs, ReasonNone},
		{"SET SESSION session_track_gtids = OWN_GTID", KindTrackGTIDs, ReasonNone},
		{"SET a=1, session_track_gtids = OWN_GTID", KindPrimary, ReasonUnclassified},
		// Unclassifiable.
		{"", KindPrimary, ReasonUnclassified},
		{"/* only a comment */", KindPrimary, ReasonUnclassified},
		{"FROBNICATE t", KindPrimary, ReasonUnclassified},
		{"'x'", KindPrimary, ReasonUnclassified},
		{"SELECT @causal_token, 1", KindRead, ReasonNone},
	}
	for _, c := range cases {
		st, err := Classify(c.q)
		if err != nil {
			t.Errorf("Classify(%q): %v", c.q, err)
			continue
		}
		if st.Kind != c.kind || st.Reason != c.reason {
			t.Errorf("Classify(%q) = %v/%v, want %v/%v", c.q, st.Kind, st.Reason, c.kind, c.reason)
		}
	}
}

func TestClassifyFlags(t *testing.T) {
	st, _ := Classify("CREATE TEMPORARY TABLE x (a int)")
	if !st.TempTable {
		t.Error("temp table not flagged")
	}
	st, _ = Classify("UPDATE t SET c = (@x := c + 1)")
	if !st.SetsUserVar || st.Reason != ReasonWrite {
		t.Errorf("write assigning a user variable: %+v", st)
	}
	st, _ = Classify("SELECT @x")
	if !st.UsesUserVar || st.SetsUserVar {
		t.Errorf("read of a user variable: %+v", st)
	}
	st, _ = Classify("LOCK TABLES t WRITE")
	if !st.LocksTables {
		t.Error("LOCK TABLES not flagged")
	}
	st, _ = Classify("UNLOCK TABLES")
	if !st.UnlocksTables {
		t.Error("UNLOCK TABLES not flagged")
	}
	st, _ = Classify("SET session_track_gtids = OWN_GTID")
	if !st.TrackGTIDs {
		t.Error("OWN_GTID not a wish to track")
	}
	st, _ = Classify("SET session_track_gtids = OFF")
	if st.TrackGTIDs {
		t.Error("OFF taken as a wish to track")
	}
}

func TestAnnotations(t *testing.T) {
	const set = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23"
	cases := []struct {
		q      string
		token  string
		form   TokenForm
		readID string
		kind   Kind
	}{
		{"/* causal_token:" + set + " */ SELECT 1", set, TokenComment, "", KindRead},
		{"SELECT 1 /* causal_token:" + set + " */", set, TokenComment, "", KindRead},
		{"SELECT /*+ ;min_gtid=" + set + " */ 1", set, TokenMinGTID, "", KindRead},
		{"/* ;min_gtid=" + set + "; */ SELECT 1", set, TokenMinGTID, "", KindRead},
		{"/* consistent_read_id:user42 */ SELECT 1", "", TokenNone, "user42", KindRead},
		{"/* consistent_read_id:user42, causal_token:tok */ SELECT 1", "tok", TokenComment, "user42", KindRead},
		{"/* causal_token:tok,consistent_read_id:user42 */ SELECT 1", "tok", TokenComment, "user42", KindRead},
		{"/* consistent_read_id:u1 */ SELECT /* consistent_read_id:u1 */ 1", "", TokenNone, "u1", KindRead},
		{"/*+ consistent_read_id:hint */ SELECT 1 -- consistent_read_id:line", "", TokenNone, "", KindRead},
		{"SELECT 'consistent_read_id:lit' /* Consistent_Read_ID:x */", "", TokenNone, "", KindRead},
		{"/* CAUSAL_TOKEN=tok */ SELECT 1", "tok", TokenComment, "", KindRead},
		{"/* causal_token:tok */ /* causal_token:tok */ SELECT 1", "tok", TokenComment, "", KindRead},
		{"SELECT 1 -- causal_token:tok", "tok", TokenComment, "", KindRead},
		{"/* hello world, app=42 */ SELECT 1", "", TokenNone, "", KindRead},
		{"SET @causal_token = '" + set + "'", set, TokenSet, "", KindSetToken},
		{"SET @causal_token = 'a''b'", "a'b", TokenSet, "", KindSetToken},
		{"SELECT 'causal_token:notacomment'", "", TokenNone, "", KindRead},
	}
	for _, c := range cases {
		st, err := Classify(c.q)
		if err != nil {
			t.Errorf("Classify(%q): %v", c.q, err)
			continue
		}
		if st.Token != c.token || st.TokenForm != c.form || st.ReadID != c.readID || st.Kind != c.kind {
			t.Errorf("Classify(%q) = token %q form %v id %q kind %v; want %q %v %q %v",
				c.q, st.Token, st.TokenForm, st.ReadID, st.Kind, c.token, c.form, c.readID, c.kind)
		}
	}
}

func TestAnnotationErrors(t *testing.T) {
	cases := []struct {
		q   string
		err error
	}{
		{"/* causal_token: */ SELECT 1", ErrEmptyAnnotation},
		{"/* causal_token:a */ SELECT /* causal_token:b */ 1", ErrConflictingTokens},
		{"/* causal_token:a min_gtid=b */ SELECT 1", ErrConflictingTokens},
		{"/* consistent_read_id: */ SELECT 1", ErrEmptyAnnotation},
		{"/* consistent_read_id:a */ SELECT /* consistent_read_id:b */ 1", ErrBadReadID},
		{"/* consistent_read_id:" + strings.Repeat("x", 257) + " */ SELECT 1", ErrBadReadID},
		{"SELECT 1 /* consistent_read_id:u1", ErrBadReadID},
		{"/* consistent_read_id:user42 causal_token:tok */ SELECT 1", ErrBadReadID},
		{"/* causal_token:tok consistent_read_id:user42 */ SELECT 1", ErrBadReadID},
		{"/*+ ;min_gtid= */ SELECT 1", ErrEmptyAnnotation},
		// An assignment to @causal_token the proxy would not evaluate: the
		// server would set a variable of that name and the token would stay.
		{"SET @causal_token = 1", ErrTokenNotLiteral},
		{"SET @causal_token = CONCAT('g1.1.', @x)", ErrTokenNotLiteral},
		{"SET @causal_token = (SELECT 'x')", ErrTokenNotLiteral},
		{"SET @causal_token := @other", ErrTokenNotLiteral},
		{"SET @a = 1, @causal_token = 'x'", ErrTokenNotLiteral},
		{"SET @`causal_token` = 'a' 'b'", ErrTokenNotLiteral},
		{"SELECT @causal_token := 'x'", ErrTokenNotLiteral},
		{"SELECT 'x' INTO @causal_token", ErrTokenNotLiteral},
		{"SELECT 1 INTO @a, @causal_token", ErrTokenNotLiteral},
		{"SET @causal_token = 'unterminated", ErrTokenNotLiteral},
		{`SET@CAusAl_token="`, ErrTokenNotLiteral},
	}
	for _, c := range cases {
		_, err := Classify(c.q)
		if !errors.Is(err, c.err) {
			t.Errorf("Classify(%q) error = %v, want %v", c.q, err, c.err)
		}
	}
}

func TestUnquote(t *testing.T) {
	for in, want := range map[string]string{
		`'abc'`:    "abc",
		`"abc"`:    "abc",
		`'a\'b'`:   "a'b",
		`'a''b'`:   "a'b",
		`'a\\b'`:   `a\b`,
		`''`:       "",
		`'unterm`:  "unterm",
		`'`:        "",
		`"x""y"`:   `x"y`,
		`'tab\tx'`: "tabtx",
	} {
		if got := unquote(in); got != want {
			t.Errorf("unquote(%s) = %q, want %q", in, got, want)
		}
	}
}

// FuzzClassify checks that the classifier never panics, that its answer is
// one of the known kinds and reasons, and that annotation values are always
// substrings of the input (nothing invented).
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"SELECT 1", "SELECT * FROM t FOR UPDATE", "/* causal_token:abc */ SELECT 1",
		"SELECT /*+ ;min_gtid=3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5 */ 1",
		"SET @causal_token = 'x'", "SELECT @causal_token", "SET session_track_gtids=OWN_GTID",
		"BEGIN", "COMMIT", "INSERT INTO t VALUES ('a''b', \"c\\\"d\")", "/*!80000 SELECT */ 1",
		"SELECT 1 -- x", "SELECT `a``b` FROM t", "WITH a AS (SELECT 1) DELETE FROM t",
		"SELECT @a := 1", "/* consistent_read_id:u1 */ SELECT 1", "'", "/*", "@", "@@", "--",
		"SET @x = (SELECT 1)", "CREATE TEMPORARY TABLE t (a int)", "EXPLAIN FOR CONNECTION 1",
		// Refusals the check must accept (FuzzClassify once flagged the first).
		"/*consistent_read_id", "SET @causal_token = CONCAT('a', 'b')", "SELECT 1 INTO @causal_token",
		// Multi-statement queries, SHOW, SET from a subquery.
		"DO 1; SET sql_mode = ''", "SELECT ';'; USE db;", "SHOW STATUS LIKE 'Ssl_cipher'", "SHOW COUNT(*) WARNINGS",
		"SET @a = (SELECT 1), sql_mode = 'x'", "SELECT @@warning_count", "SELECT SQL_CALC_FOUND_ROWS 1",
		// SET values: literals, expressions (evaluated once), locks.
		"SET @u = UUID()", "SET @a = -1.5e-3, @b = _latin1 X'41' COLLATE latin1_bin", "SET SESSION time_zone = @@GLOBAL.time_zone",
		"SET @g = GET_LOCK('x', 0)", "SET NAMES utf8mb4, @a = f()", "SET @@GLOBAL.x = 1", "FLUSH TABLES WITH READ LOCK", "CALL p(@x)",
		"GET CURRENT DIAGNOSTICS CONDITION @i @e = MYSQL_ERRNO, @`m` = MESSAGE_TEXT", "GET DIAGNOSTICS @n =",
		"SHOW STATUS LIKE 'Handler%'; SELECT 1", "SELECT @@GLOBAL.x", "SELECT @@global.", "SELECT * FROM information_schema.optimizer_trace",
		"HANDLER s.t OPEN AS h", "HANDLER h READ `PRIMARY` NEXT", "HANDLER `h` CLOSE", "DROP SCHEMA IF EXISTS `d`",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if e, multi := ClassifyMulti(q); !multi && e != (MultiEffects{}) {
			t.Fatalf("ClassifyMulti(%q): effects %+v for one statement", q, e)
		} else if multi && !strings.Contains(q, ";") {
			t.Fatalf("ClassifyMulti(%q): several statements without a semicolon", q)
		}
		st, err := Classify(q)
		if err != nil {
			if !errors.Is(err, ErrEmptyAnnotation) && !errors.Is(err, ErrConflictingTokens) &&
				!errors.Is(err, ErrBadReadID) && !errors.Is(err, ErrTokenNotLiteral) {
				t.Fatalf("unexpected error type %v", err)
			}
			return
		}
		if st.Kind > KindConnStatus || st.Reason >= numReasons {
			t.Fatalf("unknown kind/reason %v/%v", st.Kind, st.Reason)
		}
		if st.Kind == KindPrimary && st.Reason == ReasonNone {
			t.Fatalf("primary without a reason for %q", q)
		}
		if st.Kind == KindConnStatus && !slices.Contains(connStatus, st.Status) && st.Status != compressionStatus {
			t.Fatalf("conn-status %q for %q", st.Status, q)
		}
		if st.Eval != nil && st.Kind != KindSession {
			t.Fatalf("targets to evaluate on a %v statement for %q", st.Kind, q)
		}
		for _, tg := range st.Eval {
			if tg.Name == "" || !strings.Contains(q, tg.Name) {
				t.Fatalf("target %+v not in input %q", tg, q)
			}
		}
		if st.Kind == KindRead && st.Reason != ReasonNone {
			t.Fatalf("read with a reason %v for %q", st.Reason, q)
		}
		if st.TokenForm != TokenSet && st.Token != "" && !strings.Contains(q, st.Token) {
			t.Fatalf("token %q not in input %q", st.Token, q)
		}
		if st.ReadID != "" && !strings.Contains(q, st.ReadID) {
			t.Fatalf("read id %q not in input %q", st.ReadID, q)
		}
		// An empty token is SET @causal_token = '' alone (it clears the
		// session's token).
		if st.Token != "" && st.TokenForm == TokenNone || st.Token == "" && st.TokenForm != TokenNone && st.Kind != KindSetToken {
			t.Fatalf("token %q with form %v", st.Token, st.TokenForm)
		}
	})
}

func BenchmarkClassifyPointSelect(b *testing.B) {
	q := "SELECT c FROM sbtest1 WHERE id=5012"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Classify(q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClassifyWithToken(b *testing.B) {
	q := "/* causal_token:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23, consistent_read_id:user42 */ SELECT c FROM sbtest1 WHERE id=5012"
	if st, err := Classify(q); err != nil || st.ReadID != "user42" || st.TokenForm != TokenComment {
		b.Fatalf("Classify = %+v, %v", st, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Classify(q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClassifyStatements covers the classifier's other paths beside
// the point select: SET (plain, token, session_track_gtids, subquery),
// EXPLAIN/DESCRIBE and a SELECT that pins to the primary.
func BenchmarkClassifyStatements(b *testing.B) {
	for _, c := range []struct{ name, q string }{
		{"SetSession", "SET NAMES utf8mb4, sql_mode = 'STRICT_TRANS_TABLES', @a = 1"},
		{"SetToken", "SET @causal_token = '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23'"},
		{"SetTrackGTIDs", "SET SESSION session_track_gtids = OWN_GTID"},
		{"SetSubquery", "SET @a = (SELECT MAX(id) FROM t), @@SESSION.sql_mode = 'x'"},
		{"ExplainSelect", "EXPLAIN FORMAT=TREE SELECT c FROM sbtest1 WHERE id=5012"},
		{"Describe", "DESCRIBE sbtest1 c"},
		{"SelectLocking", "SELECT a.c, COUNT(*) FROM t1 a JOIN t2 b ON a.id = b.id WHERE a.k IN (1, 2, 3) AND b.x = @v GROUP BY a.c ORDER BY 2 DESC LIMIT 10 FOR SHARE"},
		{"SelectFunctions", "SELECT SQL_CALC_FOUND_ROWS GET_LOCK('x', 1), FOUND_ROWS(), @@warning_count INTO @r, @s"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Classify(c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestClassifyMulti(t *testing.T) {
	for _, c := range []struct {
		q     string
		multi bool
		want  MultiEffects
	}{
		{"SELECT 1", false, MultiEffects{}},
		{"SET a = 1;", false, MultiEffects{}},
		{"DO 1; DO 2", true, MultiEffects{}},
		{"UPDATE t SET v = 1; UPDATE t SET v = 2;", true, MultiEffects{}},
		{"DO 1; SET SESSION sql_mode = ''", true, MultiEffects{Session: true}},
		{"SELECT ';'; USE db", true, MultiEffects{Session: true}},
		{"SELECT 1 /* ; SET a=1 */; DO 2", true, MultiEffects{}},
		{"DO 1; CREATE TEMPORARY TABLE t (a INT)", true, MultiEffects{TempTable: true}},
		{"DO 1; LOCK TABLES t READ", true, MultiEffects{LocksTables: true}},
		{"DO 1; SET @causal_token = 'x'", true, MultiEffects{Session: true}},
		{"DO 1; SELECT 2 INTO @v", true, MultiEffects{SetsUserVar: true}},
	} {
		got, multi := ClassifyMulti(c.q)
		if multi != c.multi || got != c.want {
			t.Errorf("ClassifyMulti(%q) = %+v, %v; want %+v, %v", c.q, got, multi, c.want, c.multi)
		}
	}
}

func TestClassifyConnStatus(t *testing.T) {
	for q, want := range map[string]string{
		"SHOW STATUS LIKE 'Ssl_cipher'":          "Ssl_cipher",
		"show session status like 'ssl_version'": "Ssl_version",
		`SHOW LOCAL STATUS LIKE 'Ssl\_cipher'`:   "Ssl_cipher",
		"SHOW STATUS LIKE 'Ssl%'":                "",
		"SHOW GLOBAL STATUS LIKE 'Ssl_cipher'":   "",
		"SHOW STATUS LIKE 'Ssl_cipher'; DO 1":    "",
		"SHOW STATUS":                            "",
		"SHOW STATUS LIKE 'Ssl_cipher_list'":     "",
		"SHOW STATUS WHERE Variable_name = 'x'":  "",
		"SHOW STATUS LIKE 'Compression%'":        compressionStatus,
		"SHOW STATUS LIKE 'compression'":         "Compression",
		"SHOW STATUS LIKE 'Compression_level'":   "Compression_level",
		"SHOW STATUS LIKE 'Compress%'":           "",
	} {
		st, err := Classify(q)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			// SHOW GLOBAL STATUS is the primary's; the session's
			// counters follow the previous statement (issue 39,
			// defect 8); a second statement stays on the primary.
			r := ReasonPreviousStatement
			switch {
			case strings.Contains(q, "GLOBAL"):
				r = ReasonShow
			case strings.Contains(q, ";"):
				r = ReasonMultiStatement
			}
			if st.Kind != KindPrimary || st.Reason != r {
				t.Errorf("%q: %v/%v, want primary/%v", q, st.Kind, st.Reason, r)
			}
			continue
		}
		if st.Kind != KindConnStatus || st.Status != want {
			t.Errorf("%q: %v %q, want conn-status %q", q, st.Kind, st.Status, want)
		}
	}
}

func TestClassifySetEval(t *testing.T) {
	u := func(n string) SetTarget { return SetTarget{User: true, Name: n} }
	v := func(n string) SetTarget { return SetTarget{Name: n} }
	for q, want := range map[string][]SetTarget{
		// Literals: replayed as they are.
		"SET @a = 1":                                nil,
		"SET @a = -1.5e-3, @b = 'x', @c = NULL":     nil,
		"SET @a = _utf8mb4 'x' COLLATE utf8mb4_bin": nil,
		"SET @a = X'4a', @b = 0x4a, @c = b'01'":     nil,
		"SET time_zone = '+00:00', autocommit = ON": nil,
		"SET SESSION sql_mode = TRADITIONAL":        nil,
		"SET NAMES utf8mb4 COLLATE utf8mb4_bin":     nil,
		"SET @@SESSION.time_zone = SYSTEM":          nil,
		"set @a := 1;":                              nil,
		"SET CHARACTER SET utf8mb4, @a = 2":         nil,
		// Expressions: evaluated once, the targets read back.
		"SET @u = UUID()":                              {u("@u")},
		"SET @a = 1, @u = UUID()":                      {u("@a"), u("@u")},
		"SET @saved = @@transaction_read_only":         {u("@saved")},
		"SET @id = f()":                                {u("@id")},
		"SET @a = @b":                                  {u("@a")},
		"SET @a = 1 + 1":                               {u("@a")},
		"SET @a = x":                                   {u("@a")},
		"SET @a = CURRENT_TIMESTAMP":                   {u("@a")},
		"SET time_zone = CONCAT('+0', '1:00')":         {v("time_zone")},
		"SET @@SESSION.sql_mode = (SELECT 'ANSI')":     {v("sql_mode")},
		"SET SESSION sql_mode = @m, @`q` = (SELECT 1)": {v("sql_mode"), u("@`q`")},
		"SET time_zone = CURRENT_TIMESTAMP":            {v("time_zone")},
		"SET @g = GET_LOCK('x', 0)":                    {u("@g")},
	} {
		st, err := Classify(q)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		if st.Kind != KindSession || !slices.Equal(st.Eval, want) {
			t.Errorf("%q: %v Eval=%v, want session Eval=%v", q, st.Kind, st.Eval, want)
		}
	}
	for q, want := range map[string]Stmt{
		"SET @@GLOBAL.read_only = 1":  primary(ReasonWrite),
		"SET @a = 1, @@PERSIST.x = 2": {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true, SetsUserVar: true, UsesUserVar: true},
		"SET @@session.optimizer_switch = 'a=on', @@global.optimizer_switch = 'a=on'": {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET GLOBAL x = 1, GLOBAL y = 2":                                              primary(ReasonWrite),
		// MySQL: a scope word covers later names without one (both
		// global), not @@y (session) nor a name after SESSION.
		"SET GLOBAL x = 1, y = 2":                              primary(ReasonWrite),
		"SET PERSIST x = 1, y = DEFAULT":                       primary(ReasonWrite),
		"SET GLOBAL x = 1, @@y = 2":                            {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET GLOBAL x = 1, SESSION y = 2, z = 3":               {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET @a = 1, GLOBAL x = 1, y = 2":                      {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true, SetsUserVar: true, UsesUserVar: true},
		"SET GLOBAL x = 1, LOCAL y = 2":                        {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET @a = 1; SELECT 1":                                 primary(ReasonMultiStatement),
		"SET @a = 1, session_track_gtids = OFF":                primary(ReasonUnclassified),
		"SET @a":                                               primary(ReasonUnclassified),
		"SET session_track_state_change = OFF":                 {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET @a = 1, @@SESSION.session_track_state_change = 0": {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET sql_log_bin = OFF":                                {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET profiling = 1":                                    {Kind: KindSession, PinsSession: true, Traces: true},
		"SET optimizer_trace = 'enabled=on'":                   {Kind: KindSession, PinsSession: true, Traces: true},
		"SET @@session.SQL_LOG_BIN = 0":                        {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET SESSION sql_log_bin = 1":                          {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true},
		"SET NAMES utf8mb4, @a = UUID()":                       {Kind: KindPrimary, Reason: ReasonUserVariable, PinsSession: true, SetsUserVar: true, UsesUserVar: true},
		"SET ENABLE_CASCADE_TRIGGERS = ON":                     {Kind: KindSession, CascadeTriggers: true},
		"SET @a = 1, @@session.enable_cascade_triggers = 0":    {Kind: KindSession, CascadeTriggers: true, UsesUserVar: true},
		"SET GLOBAL enable_cascade_triggers = ON":              primary(ReasonWrite),
		"SET enable_cascade_triggers = ON, @@global.x = 1":     {Kind: KindPrimary, Reason: ReasonUnclassified, PinsSession: true, CascadeTriggers: true},
	} {
		st, err := Classify(q)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		st.ReadID = ""
		if !reflect.DeepEqual(st, want) {
			t.Errorf("%q: %+v, want %+v", q, st, want)
		}
	}
	if st, _ := Classify("SET @g = GET_LOCK('x', 0)"); !st.NamedLock {
		t.Errorf("SET @g = GET_LOCK(...): NamedLock false")
	}
	for _, q := range []string{"DO GET_LOCK('x', 0)", "SELECT IS_FREE_LOCK('x')", "INSERT INTO t SELECT RELEASE_LOCK('x')"} {
		if st, _ := Classify(q); !st.NamedLock {
			t.Errorf("%q: NamedLock false", q)
		}
	}
	if st, _ := Classify("CALL p(@x)"); !st.Call || st.Kind != KindPrimary || !st.SetsUserVar {
		t.Errorf("CALL: %+v, want primary Call", st)
	}
	for q, locks := range map[string]bool{"FLUSH TABLES WITH READ LOCK": true, "flush tables t1, t2 with read lock": true,
		"FLUSH TABLES t FOR EXPORT": true, "FLUSH TABLES": false, "FLUSH LOGS": false} {
		if st, _ := Classify(q); st.LocksTables != locks || st.Kind != KindPrimary {
			t.Errorf("%q: %+v, want primary LocksTables=%v", q, st, locks)
		}
	}
}

// TestClassifyFlushStatusPins: FLUSH STATUS resets the counters on the
// primary only, so it pins the session there; other FLUSHes do not.
func TestClassifyFlushStatusPins(t *testing.T) {
	for q, pins := range map[string]bool{
		"FLUSH STATUS":                    true,
		"flush local status":              true,
		"FLUSH NO_WRITE_TO_BINLOG TABLES": false,
	} {
		st, err := Classify(q)
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind != KindPrimary || st.PinsSession != pins {
			t.Errorf("%q: %v PinsSession=%v, want primary PinsSession=%v", q, st.Kind, st.PinsSession, pins)
		}
	}
}

// TestClassifyHandlerAndDropSchema: HANDLER OPEN and CLOSE (the
// handler-open hold) and DROP DATABASE / SCHEMA (the session's schema
// may be gone) are told apart from the rest.
func TestClassifyHandlerAndDropSchema(t *testing.T) {
	type want struct{ open, close, drop bool }
	for q, w := range map[string]want{
		"HANDLER t OPEN": {open: true}, "handler s.t open as h": {open: true}, "HANDLER `s`.`t` OPEN h": {open: true},
		"HANDLER h READ FIRST": {}, "HANDLER h READ `PRIMARY` NEXT": {}, "HANDLER `open` READ NEXT": {},
		"HANDLER h CLOSE": {close: true}, "HANDLER s.close CLOSE": {close: true}, "HANDLER": {},
		"DROP DATABASE d": {drop: true}, "drop schema if exists `d`": {drop: true},
		"DROP TABLE d": {}, "CREATE DATABASE d": {},
	} {
		st, err := Classify(q)
		if err != nil || st.Kind != KindPrimary || st.HandlerOpen != w.open || st.HandlerClose != w.close || st.DropsSchema != w.drop {
			t.Errorf("%q: %+v, %v; want primary %+v", q, st, err, w)
		}
	}
}

// TestClassifyLastInsertID: a call of LAST_INSERT_ID anywhere (a read, a
// write, a SET) is flagged; the word alone is not.
func TestClassifyLastInsertID(t *testing.T) {
	for q, want := range map[string]bool{
		"SELECT LAST_INSERT_ID()": true, "select last_insert_id(5)": true, "INSERT INTO t VALUES (LAST_INSERT_ID())": true,
		"UPDATE t SET id = LAST_INSERT_ID(id + 1)": true, "SET @a = LAST_INSERT_ID()": true, "DO LAST_INSERT_ID(3)": true,
		"SELECT 1": false, "SELECT last_insert_id FROM t": false, "INSERT INTO t VALUES (1)": false,
	} {
		if st, err := Classify(q); err != nil || st.LastInsertID != want {
			t.Errorf("%q: LastInsertID %v, %v; want %v", q, st.LastInsertID, err, want)
		}
	}
}

// TestClassifyTrackVars: every session form of a SET of
// session_track_system_variables is flagged (refused on MariaDB); a
// global one, a user variable and another variable are not.
func TestClassifyTrackVars(t *testing.T) {
	for q, want := range map[string]bool{
		"SET session_track_system_variables = ''":                     true,
		"SET @@session.session_track_system_variables = 'autocommit'": true,
		"SET SESSION `session_track_system_variables` = '*'":          true,
		"SET autocommit = 1, session_track_system_variables = 'x'":    true,
		"SET @@session_track_system_variables = CONCAT('a', ',b')":    true,
		"SET GLOBAL session_track_system_variables = ''":              false,
		"SET @session_track_system_variables = ''":                    false,
		"SET session_track_schema = 1":                                false,
	} {
		st, err := Classify(q)
		if err != nil {
			t.Fatal(err)
		}
		if st.TrackVars != want {
			t.Errorf("%s: TrackVars %v, want %v", q, st.TrackVars, want)
		}
	}
}
