package proxy

import (
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// columnRename puts CONNECTION_ID() back in result column names: MySQL
// names a select-list item without an alias after its text, and the text
// the server ran has the call replaced (withConnectionID), so
// `SELECT 1 + CONNECTION_ID()` would come back named `1 + CAST(7 AS
// UNSIGNED)`. The zero value renames nothing.
type columnRename struct {
	// from is the replacement the server saw (CAST(<id> AS UNSIGNED)).
	from string
	// to is the statement's first call as the client wrote it.
	to string
}

// apply returns the column definition packet def (4 bytes of header room
// first) with from replaced by to in its name, or def itself when its
// name does not contain from (or the packet is not a definition it can
// read: relayed as it came).
func (c columnRename) apply(def []byte) []byte {
	if c.from == "" || len(def) < 5 {
		return def
	}
	p := def[4:]
	off := 0
	for range 4 { // catalog, schema, table, org_table
		_, n, ok := lenencString(p[off:])
		if !ok {
			return def
		}
		off += n
	}
	name, n, ok := lenencString(p[off:])
	if !ok || !strings.Contains(string(name), c.from) {
		return def
	}
	renamed := strings.ReplaceAll(string(name), c.from, c.to)
	out := make([]byte, 0, len(def)+len(renamed)-len(name))
	out = append(out, def[:4+off]...)
	out = mysql.AppendLengthEncodedInteger(out, uint64(len(renamed)))
	out = append(out, renamed...)
	return append(out, p[off+n:]...)
}

// applyAll renames in each of defs (raw definitions without header room,
// as go-mysql's client keeps a prepared statement's).
func (c columnRename) applyAll(defs [][]byte) [][]byte {
	if c.from == "" {
		return defs
	}
	out := make([][]byte, len(defs))
	for i, d := range defs {
		out[i] = c.apply(append(make([]byte, 4, 4+len(d)), d...))[4:]
	}
	return out
}

// lenencString reads a length-encoded string at the start of p: its
// bytes and the length of the whole field; ok false when p is too short
// for it (go-mysql's readers index past a short length prefix).
func lenencString(p []byte) (s []byte, n int, ok bool) {
	if len(p) == 0 {
		return nil, 0, false
	}
	var w int // bytes of length after the first
	switch p[0] {
	case 0xfb, 0xff:
		return nil, 0, false
	case 0xfc:
		w = 2
	case 0xfd:
		w = 3
	case 0xfe:
		w = 8
	}
	if len(p) < 1+w {
		return nil, 0, false
	}
	size := uint64(p[0])
	if w > 0 {
		size = 0
		for i := w; i >= 1; i-- {
			size = size<<8 | uint64(p[i])
		}
	}
	n = 1 + w
	if size > uint64(len(p)-n) {
		return nil, 0, false
	}
	return p[n : n+int(size)], n + int(size), true
}
