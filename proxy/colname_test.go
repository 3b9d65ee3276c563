package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestColumnRename(t *testing.T) {
	c := columnRename{from: "CAST(7 AS UNSIGNED)", to: "connection_id()"}
	def := func(name string) []byte {
		f := &mysql.Field{Schema: []byte("s"), Table: []byte("t"), OrgTable: []byte("t"), Name: []byte(name), Type: mysql.MYSQL_TYPE_LONGLONG, Flag: mysql.UNSIGNED_FLAG}
		return append(make([]byte, 4), f.Dump()...)
	}
	for _, tc := range []struct{ in, want string }{
		{"1 + CAST(7 AS UNSIGNED)", "1 + connection_id()"},
		{"CAST(7 AS UNSIGNED) - CAST(7 AS UNSIGNED)", "connection_id() - connection_id()"},
		{"a", "a"},
		{"CAST(8 AS UNSIGNED)", "CAST(8 AS UNSIGNED)"},
	} {
		got := c.apply(def(tc.in))
		if !bytes.Equal(got, def(tc.want)) {
			t.Errorf("%q: got % x, want the definition named %q", tc.in, got, tc.want)
		}
		raw := def(tc.in)[4:]
		if all := c.applyAll([][]byte{raw}); !bytes.Equal(all[0], def(tc.want)[4:]) {
			t.Errorf("%q: applyAll got % x", tc.in, all[0])
		}
	}
	long := def(string(bytes.Repeat([]byte("x"), 300)) + "CAST(7 AS UNSIGNED)")
	if got, want := c.apply(long), def(string(bytes.Repeat([]byte("x"), 300))+"connection_id()"); !bytes.Equal(got, want) {
		t.Errorf("a name of 300+ bytes (2-byte length) not renamed: % x", got[:16])
	}
	if d := def("1 + CAST(7 AS UNSIGNED)"); !bytes.Equal((columnRename{}).apply(d), d) {
		t.Error("the zero rename changed a definition")
	}
}

// FuzzColumnRename: any packet is returned as it is unless its name
// field holds the replacement, never a panic.
func FuzzColumnRename(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x03def\x01s\x01t\x01t\x17CAST(7 AS UNSIGNED) + 1\x00\x0c"))
	f.Add([]byte("\x00\x00\x00\x00\xfc\xff"))
	f.Add([]byte("\x00\x00\x00\x00\xfe\x01\x02"))
	f.Add([]byte("\x00\x00\x00\x00\x03def\x00\x00\x00\xfd\x10\x00"))
	c := columnRename{from: "CAST(7 AS UNSIGNED)", to: "CONNECTION_ID()"}
	f.Fuzz(func(t *testing.T, p []byte) {
		out := c.apply(p)
		if !bytes.Contains(p, []byte(c.from)) && !bytes.Equal(out, p) {
			t.Fatalf("% x changed to % x without the replacement in it", p, out)
		}
		if len(out) < 4 && len(p) >= 4 {
			t.Fatalf("header room lost: % x", out)
		}
	})
}
