package proxy

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestGetDiagnosticsVars: the classifier lists the user variables GET
// DIAGNOSTICS assigns (not a condition number given as a variable), and
// settleDiag's SET gives each its value as a literal of its type.
func TestGetDiagnosticsVars(t *testing.T) {
	st, err := Classify("GET DIAGNOSTICS CONDITION @i @e = MYSQL_ERRNO, @`m, n` = MESSAGE_TEXT, @s=RETURNED_SQLSTATE")
	if err != nil || st.DiagVars != "@e\x00@`m, n`\x00@s\x00" || st.Reason != ReasonPreviousStatement {
		t.Fatalf("%+v, %v", st, err)
	}
	res := &mysql.Result{Resultset: &mysql.Resultset{
		Fields: []*mysql.Field{{Type: mysql.MYSQL_TYPE_LONGLONG}, {Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: 255}, {Type: mysql.MYSQL_TYPE_NULL, Charset: 63}},
		Values: [][]mysql.FieldValue{{
			mysql.NewFieldValue(mysql.FieldValueTypeSigned, uint64(1292), nil),
			mysql.NewFieldValue(mysql.FieldValueTypeString, 0, []byte("a'b")),
			mysql.NewFieldValue(mysql.FieldValueTypeNull, 0, nil),
		}},
	}}
	want := "SET @e = 1292, @`m` = _utf8mb4 X'612762' COLLATE utf8mb4_0900_ai_ci, @s = NULL"
	if got := setLiterals([]string{"@e", "@`m`", "@s"}, res); got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}
