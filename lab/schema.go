package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Execer runs SQL statements on one node. The lab's own connections
// (nodeConn, the router's sessions, the proxy's connections) implement it;
// a user's test may wrap its own client.
//
// A write's GTID is never read from the Result: go-mysql v1.16.0 returns
// the buffer holding an OK packet to a process-wide pool before Execute
// returns, and Result.SessionTracking's strings alias it, so under
// concurrency they may already hold another connection's bytes.
// ExecuteWrite returns the GTID parsed from a private copy of the response
// (mysqlwire.Recorder for a go-mysql client.Conn).
type Execer interface {
	// Execute runs one statement.
	Execute(ctx context.Context, query string) (*mysql.Result, error)
	// ExecuteWrite runs one statement (a transaction's committing one: an
	// autocommit write or COMMIT) and returns the GTID the server reported
	// for it (session_track_gtids=OWN_GTID), taken from a private copy of
	// the response's last OK packet; gtid is "" when it carried none. The
	// Result's SessionTracking must not be used.
	ExecuteWrite(ctx context.Context, query string) (res *mysql.Result, gtid string, err error)
}

// Workload is the schema and the read and write paths the ground truth is
// measured on. DefaultWorkload is the lab's own; a user can supply another
// (their own tables, their own queries) as long as it keeps the contract
// documented in docs/lab.md:
//
//   - Write commits, in ONE transaction, the session's own row at version
//     seq (never lowering it) and an increment of hot row hot; it returns
//     the transaction's GTID (empty when the connection did not report one)
//     as Execer.ExecuteWrite of the committing statement returned it, and
//     the version the increment gave the hot row (WriteAck.Hot; 0 when the
//     workload cannot tell, which leaves that write out of the all-writes
//     check).
//   - Read answers from ONE read view (one statement, or one consistent
//     snapshot transaction) the session's own row version and every hot
//     row's version into hot (len(hot) == the hot row count).
type Workload interface {
	// Setup creates the schema on the primary (dropping what was there) for
	// sessions sessions and hot hot rows.
	Setup(ctx context.Context, primary Execer, sessions, hot int) error
	// Write is the session's write.
	Write(ctx context.Context, primary Execer, session int, seq int64, hot int) (WriteAck, error)
	// Read is the session's read.
	Read(ctx context.Context, node Execer, session int, hot []int64) (own int64, err error)
}

// WriteAck is what a Workload's write reports.
type WriteAck struct {
	// GTID is the transaction's GTID as Execer.ExecuteWrite returned it (""
	// when the connection reported none).
	GTID string
	// Hot is the version the write gave its hot row: every read issued
	// after the write was acknowledged must see at least it (the
	// all-writes check). 0: unknown, the write is left out of that check.
	Hot int64
}

// DefaultWorkload is the lab's schema: database causallab_lab with
//
//	session(id INT PRIMARY KEY, version BIGINT)  one row per session
//	hot(id INT PRIMARY KEY, version BIGINT)      a few shared rows
//
// A write is one autocommit multi-table UPDATE (one transaction, one round
// trip, its GTID in the OK packet, the hot row's new version as the OK
// packet's last insert id through LAST_INSERT_ID(expr)); a read is one
// SELECT (one read view).
type DefaultWorkload struct {
	// Database is the schema name; default "causallab_lab".
	Database string
}

var _ Workload = (*DefaultWorkload)(nil)

func (w *DefaultWorkload) db() string {
	if w.Database == "" {
		return "causallab_lab"
	}
	return w.Database
}

// Setup implements Workload.
func (w *DefaultWorkload) Setup(ctx context.Context, primary Execer, sessions, hot int) error {
	if sessions < 1 || hot < 1 {
		return fmt.Errorf("lab: setup needs sessions>=1 and hot>=1, got %d and %d", sessions, hot)
	}
	db := w.db()
	stmts := []string{
		"DROP DATABASE IF EXISTS " + db,
		"CREATE DATABASE " + db,
		"CREATE TABLE " + db + ".session (id INT NOT NULL PRIMARY KEY, version BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE " + db + ".hot (id INT NOT NULL PRIMARY KEY, version BIGINT NOT NULL) ENGINE=InnoDB",
	}
	for _, s := range stmts {
		if _, err := primary.Execute(ctx, s); err != nil {
			return fmt.Errorf("lab: setup %q: %w", s, err)
		}
	}
	if err := insertRows(ctx, primary, db+".session", sessions); err != nil {
		return err
	}
	return insertRows(ctx, primary, db+".hot", hot)
}

// insertRows fills table with rows 0..n-1 at version 0, in batches.
func insertRows(ctx context.Context, ex Execer, table string, n int) error {
	const batch = 2000
	var b strings.Builder
	for lo := 0; lo < n; lo += batch {
		b.Reset()
		b.WriteString("INSERT INTO ")
		b.WriteString(table)
		b.WriteString(" (id, version) VALUES ")
		for i := lo; i < min(lo+batch, n); i++ {
			if i > lo {
				b.WriteByte(',')
			}
			b.WriteByte('(')
			b.WriteString(strconv.Itoa(i))
			b.WriteString(",0)")
		}
		if _, err := ex.Execute(ctx, b.String()); err != nil {
			return fmt.Errorf("lab: filling %s: %w", table, err)
		}
	}
	return nil
}

// WriteQuery is the default write statement (exported for docs and tests).
func (w *DefaultWorkload) WriteQuery(session int, seq int64, hot int) string {
	db := w.db()
	return "UPDATE " + db + ".session s, " + db + ".hot h SET s.version = GREATEST(s.version, " +
		strconv.FormatInt(seq, 10) + "), h.version = LAST_INSERT_ID(h.version + 1) WHERE s.id = " +
		strconv.Itoa(session) + " AND h.id = " + strconv.Itoa(hot)
}

// LockQuery is a locking read of hot row hot (the row-lock condition
// holds it on a replica).
func (w *DefaultWorkload) LockQuery(hot int) string {
	return "SELECT id FROM " + w.db() + ".hot WHERE id = " + strconv.Itoa(hot) + " FOR UPDATE"
}

// rowLocker is a Workload that can lock one of its hot rows
// (DefaultWorkload.LockQuery): the row-lock condition needs it.
type rowLocker interface {
	LockQuery(hot int) string
}

// lockQuery is w's locking read of hot row 0, "" if w has none.
func lockQuery(w Workload) string {
	if l, ok := w.(rowLocker); ok {
		return l.LockQuery(0)
	}
	return ""
}

// ReadQuery is the default read statement: one row per hot row, each
// carrying the session's own version too.
func (w *DefaultWorkload) ReadQuery(session int) string {
	db := w.db()
	return "SELECT (SELECT version FROM " + db + ".session WHERE id = " + strconv.Itoa(session) +
		"), id, version FROM " + db + ".hot ORDER BY id"
}

// Write implements Workload. The hot row's new version is the OK packet's
// last insert id (LAST_INSERT_ID(expr) in WriteQuery).
func (w *DefaultWorkload) Write(ctx context.Context, primary Execer, session int, seq int64, hot int) (WriteAck, error) {
	r, g, err := primary.ExecuteWrite(ctx, w.WriteQuery(session, seq, hot))
	if err != nil {
		if r != nil {
			// A write that committed without a tracked GTID still reports
			// its hot version (the ground truth judges reads against it).
			return WriteAck{GTID: g, Hot: int64(r.InsertId)}, err
		}
		return WriteAck{}, err
	}
	if r.AffectedRows == 0 {
		return WriteAck{}, fmt.Errorf("lab: write of session %d seq %d changed no row (schema not set up?)", session, seq)
	}
	return WriteAck{GTID: g, Hot: int64(r.InsertId)}, nil
}

// Read implements Workload.
func (w *DefaultWorkload) Read(ctx context.Context, node Execer, session int, hot []int64) (int64, error) {
	r, err := node.Execute(ctx, w.ReadQuery(session))
	if err != nil {
		return 0, err
	}
	if r.Resultset == nil {
		return 0, fmt.Errorf("lab: read of session %d returned no result set", session)
	}
	return parseReadRows(r.Resultset, session, hot)
}

// parseReadRows decodes the default read's rows into hot and returns the
// own version. It rejects any answer that does not hold exactly the
// expected rows.
func parseReadRows(rs *mysql.Resultset, session int, hot []int64) (int64, error) {
	if len(rs.Values) != len(hot) {
		return 0, fmt.Errorf("lab: read of session %d returned %d hot rows, want %d", session, len(rs.Values), len(hot))
	}
	var own int64
	for i, row := range rs.Values {
		if len(row) != 3 {
			return 0, fmt.Errorf("lab: read of session %d: row %d has %d columns, want 3", session, i, len(row))
		}
		if row[0].Type == mysql.FieldValueTypeNull {
			return 0, fmt.Errorf("lab: read of session %d: the session's row is missing", session)
		}
		o, err := fieldInt(row[0])
		if err != nil {
			return 0, fmt.Errorf("lab: read of session %d: own version: %w", session, err)
		}
		id, err := fieldInt(row[1])
		if err != nil {
			return 0, fmt.Errorf("lab: read of session %d: hot id: %w", session, err)
		}
		if id != int64(i) {
			return 0, fmt.Errorf("lab: read of session %d: row %d is hot row %d", session, i, id)
		}
		v, err := fieldInt(row[2])
		if err != nil {
			return 0, fmt.Errorf("lab: read of session %d: hot version: %w", session, err)
		}
		if i == 0 {
			own = o
		} else if o != own {
			return 0, fmt.Errorf("lab: read of session %d: own version differs between rows (%d, %d)", session, own, o)
		}
		hot[i] = v
	}
	return own, nil
}

// fieldInt reads an integer column, text or binary protocol.
func fieldInt(v mysql.FieldValue) (int64, error) {
	switch v.Type {
	case mysql.FieldValueTypeSigned:
		return v.AsInt64(), nil
	case mysql.FieldValueTypeUnsigned:
		return int64(v.AsUint64()), nil
	case mysql.FieldValueTypeString:
		return strconv.ParseInt(string(v.AsString()), 10, 64)
	case mysql.FieldValueTypeNull:
		return 0, fmt.Errorf("NULL")
	}
	return 0, fmt.Errorf("unexpected field type %d", v.Type)
}
