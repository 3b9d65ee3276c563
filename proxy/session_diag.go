package proxy

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/charset"
)

// diagCopy is what a GET DIAGNOSTICS run on a replica connection (the
// previous statement ran there, ReasonPreviousStatement) left to copy:
// the user variables it assigned exist on that connection only.
type diagCopy struct {
	bc   *backendConn
	vars []string
}

// settleDiag copies the user variables a GET DIAGNOSTICS assigned on a
// replica to the session (the primary, and replayed on its other
// connections, as a client's SET @v = literal is), before the session's
// next statement that is not itself a diagnostics read: reading them
// earlier would be a statement on the replica connection, clearing the
// diagnostics area a second GET DIAGNOSTICS or SHOW WARNINGS still reads.
// A copy that fails (the replica connection lost) fails the statement,
// counted in client_errors_total{kind="diagnostics-variables-lost"}.
func (s *session) settleDiag() error {
	d := s.diag
	if d.bc == nil {
		return nil
	}
	s.diag = diagCopy{}
	lost := func(err error) error {
		return s.proxyErr("diagnostics-variables-lost", codeBackendLost,
			"the user variables GET DIAGNOSTICS set on %s (%s) were lost with its connection: %v", d.bc.b.Name, strings.Join(d.vars, ", "), err)
	}
	if d.bc.broken {
		return lost(errUnresponsive)
	}
	res, err := d.bc.exec(s.ctx, "SELECT "+strings.Join(d.vars, ", "))
	if err != nil || res.Resultset == nil || len(res.Values) != 1 || len(res.Values[0]) != len(d.vars) {
		d.bc.broken = err != nil
		return lost(err)
	}
	set := setLiterals(d.vars, res)
	if err := s.ensurePrimary(); err != nil {
		return err
	}
	if _, err := s.primary.exec(s.ctx, set); err != nil {
		s.primary.broken = true
		return lost(err)
	}
	s.replayEverywhere(set)
	return nil
}

// setLiterals is SET @v = <literal>, ... giving each of vars the value
// of res's only row: numbers as numbers, strings in their character set
// and collation (hex literals: any byte), NULL.
func setLiterals(vars []string, res *mysql.Result) string {
	var b strings.Builder
	b.WriteString("SET ")
	for i, v := range vars {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v)
		b.WriteString(" = ")
		b.WriteString(literal(res.Values[0][i], res.Fields[i]))
	}
	return b.String()
}

// literal is fv, a value of field f, as SQL.
func literal(fv mysql.FieldValue, f *mysql.Field) string {
	switch fv.Type {
	case mysql.FieldValueTypeNull:
		return "NULL"
	case mysql.FieldValueTypeUnsigned:
		return strconv.FormatUint(fv.AsUint64(), 10)
	case mysql.FieldValueTypeSigned:
		return strconv.FormatInt(fv.AsInt64(), 10)
	case mysql.FieldValueTypeFloat:
		return strconv.FormatFloat(fv.AsFloat64(), 'e', -1, 64)
	}
	lit := "X'" + hex.EncodeToString(fv.AsString()) + "'"
	if f.Type == mysql.MYSQL_TYPE_NEWDECIMAL {
		return string(fv.AsString()) // digits, sign, point: a DECIMAL literal
	}
	if col, err := charset.GetCollationByID(int(f.Charset)); err == nil && col.CharsetName != "binary" {
		return "_" + col.CharsetName + " " + lit + " COLLATE " + col.Name
	}
	return "_binary " + lit
}
