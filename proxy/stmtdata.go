package proxy

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// stmtMemory is what the proxy remembers of a session's prepared
// statements between commands, by the statement id it gave the client:
// each statement's parameter count and the types its last execution sent,
// and the long data sent for its next execution. Used by the session's
// goroutine only (no locks).
//
// The types: the protocol lets a client send a statement's parameter types
// only on its first execution (new-params-bound flag 1) and omit them on
// the next ones (libmysqlclient and MariaDB's client, so sysbench, do).
// The proxy prepares a statement on each backend that runs it, so an
// execution routed to a backend whose statement never saw the types gets
// them put back in (fix). A statement whose types were never sent is
// relayed as it came: the backend answers with MySQL's own error.
//
// The long data: COM_STMT_SEND_LONG_DATA chunks are kept here (the
// command has no response; MySQL bounds each parameter by
// max_allowed_packet, the session's budget bounds them all) and put into
// the statement's next execution as ordinary values: the backend that will
// run the statement is chosen only at execution. Cleared at execution,
// COM_STMT_RESET, COM_STMT_CLOSE and COM_RESET_CONNECTION.
type stmtMemory struct {
	// params maps the statement id to its parameter count and
	// remembered types; the session fills counts at prepare.
	params map[uint32]*stmtParams
	// longData holds each statement id's long data.
	longData map[uint32]*stmtLongData
	// budget bounds the bytes a session holds between statements (long
	// data here; prepared statement texts and replayed statements in the
	// session): max_session_bytes.
	budget *byteBudget
	// maxPacket is max_allowed_packet: one long-data parameter, and one
	// execution with its long data put in.
	maxPacket int
	// count counts what could not be kept or fixed, by kind (a label of
	// causallab_proxy_client_errors_total).
	count func(kind string)
	// alt is a second buffer for the type rewrite; one is fix's array for
	// a payload in one piece (no allocation per execution).
	alt []byte
	one [1][]byte
}

func newStmtMemory(budget *byteBudget, maxPacket int, count func(string)) *stmtMemory {
	return &stmtMemory{params: map[uint32]*stmtParams{}, budget: budget, maxPacket: maxPacket, count: count}
}

// stmtParams is one prepared statement's parameter count and the types
// (2 bytes each) of its last execution that sent them.
type stmtParams struct {
	n     int
	types []byte
}

// stmtLongData is one statement's long data, by parameter, as the chunks
// arrived; refused is the error its next execution fails with (a chunk was
// refused: its data was dropped).
type stmtLongData struct {
	params  map[uint16]*paramData
	size    int // bytes held, all parameters
	refused *mysql.MyError
}

// byteBudget counts a session's bytes against a limit
// (max_session_bytes) and, when total is set, against the bytes of every
// session (max_total_session_bytes). One goroutine uses it (the
// session's), so it needs no lock; total is shared (atomic), touched only
// when bytes are taken or given, never per statement.
type byteBudget struct {
	limit, used int
	total       *totalBudget
	// byTotal: the last refusal was the total's (its error names
	// max_total_session_bytes).
	byTotal bool
}

// take reserves n bytes; false (nothing reserved) if the session's limit
// or the total would be passed.
func (b *byteBudget) take(n int) bool {
	if b == nil {
		return true
	}
	if n > b.limit-b.used {
		b.byTotal = false
		return false
	}
	if !b.total.take(n) {
		b.byTotal = true
		return false
	}
	b.used += n
	return true
}

// give returns n bytes taken before.
func (b *byteBudget) give(n int) {
	if b != nil {
		b.used -= n
		b.total.give(n)
	}
}

// release gives back everything the session still holds (its end).
func (b *byteBudget) release() {
	if b != nil {
		b.give(b.used)
	}
}

// exceeded names the bound the last refused take passed and its value
// (for the refusal's error and its metric kind).
func (b *byteBudget) exceeded() (key string, limit int, kind string) {
	if b.byTotal {
		return "max_total_session_bytes", int(b.total.limit), "total-session-bytes"
	}
	return "max_session_bytes", b.limit, "session-bytes"
}

// totalBudget is max_total_session_bytes: the bytes every session holds
// between statements, shared by the Server's sessions.
type totalBudget struct {
	limit int64
	used  atomic.Int64
}

// take reserves n bytes of the total; false (nothing reserved) past it.
func (t *totalBudget) take(n int) bool {
	if t == nil {
		return true
	}
	if t.used.Add(int64(n)) > t.limit {
		t.used.Add(-int64(n))
		return false
	}
	return true
}

// give returns n bytes of the total.
func (t *totalBudget) give(n int) {
	if t != nil {
		t.used.Add(-int64(n))
	}
}

// chunkMax is the largest block a long-data chunk is read into (a block
// is allocated once bytes of it arrived).
const chunkMax = 64 << 10

// prepared records a new statement and its parameter count.
func (m *stmtMemory) prepared(id uint32, n int) { m.params[id] = &stmtParams{n: n} }

// closed forgets statement id (COM_STMT_CLOSE).
func (m *stmtMemory) closed(id uint32) {
	delete(m.params, id)
	m.dropLongData(id)
}

// reset forgets every statement (COM_RESET_CONNECTION, COM_CHANGE_USER).
func (m *stmtMemory) reset() {
	clear(m.params)
	for id := range m.longData {
		m.dropLongData(id)
	}
}

// paramData is one parameter's long data, in the blocks it arrived in.
type paramData struct {
	chunks [][]byte
	size   int
}

// readLongData keeps (or drops) one COM_STMT_SEND_LONG_DATA message
// whose first packet (seq, length bytes) has begun. It has no answer, in
// MySQL too: a refused chunk fails the statement's next execution.
func (m *stmtMemory) readLongData(c *clientConn, length int, seq byte) error {
	if length < 7 || m == nil { // malformed: MySQL ignores it
		return c.discard(length)
	}
	b, err := c.peek(7, length)
	if err != nil {
		return err
	}
	id, param := binary.LittleEndian.Uint32(b[1:5]), binary.LittleEndian.Uint16(b[5:7])
	_, _ = c.r.Discard(7)
	var ld *stmtLongData
	if sp := m.params[id]; sp != nil && int(param) < sp.n {
		// An unknown statement or parameter is ignored, as MySQL does.
		if ld = m.longData[id]; ld == nil {
			if m.longData == nil {
				m.longData = map[uint32]*stmtLongData{}
			}
			ld = &stmtLongData{params: map[uint16]*paramData{}}
			m.longData[id] = ld
		}
	}
	n := length - 7
	for {
		if err := m.keepChunk(c, ld, param, n); err != nil {
			return err
		}
		if length < mysql.MaxPayloadLen {
			return nil
		}
		hdr, err := c.header(false)
		if err != nil {
			return err
		}
		if hdr[3] != seq+1 {
			return c.protocolError("out-of-order continuation packet")
		}
		length, seq = packetLen(hdr[:]), hdr[3]
		n = length
	}
}

// keepChunk reads n bytes of long data for parameter param of ld (nil:
// dropped), within max_allowed_packet per parameter and the session's
// budget.
func (m *stmtMemory) keepChunk(c *clientConn, ld *stmtLongData, param uint16, n int) error {
	if ld == nil || ld.refused != nil {
		return c.discard(n)
	}
	pd := ld.params[param]
	if pd == nil {
		pd = &paramData{}
		ld.params[param] = pd
	}
	switch {
	case pd.size+n > m.maxPacket:
		m.count("long-data-too-large")
		m.refuseLongData(ld, mysql.NewError(mysql.ER_UNKNOWN_ERROR, fmt.Sprintf(
			"causallab proxy: Parameter of prepared statement which is set through mysql_send_long_data() is longer than 'max_allowed_packet' bytes (max_allowed_packet %d)", m.maxPacket)))
		return c.discard(n)
	case !m.budget.take(n):
		key, limit, kind := m.budget.exceeded()
		m.count(kind)
		m.refuseLongData(ld, mysql.NewError(mysql.ER_UNKNOWN_ERROR, fmt.Sprintf(
			"causallab proxy: long data refused: %s would hold more than %s (%d) of long data, prepared statements and session statements", budgetHolder(key), key, limit)))
		return c.discard(n)
	}
	for n > 0 {
		block, err := c.appendArrived(nil, min(n, chunkMax))
		pd.chunks = append(pd.chunks, block)
		pd.size += len(block)
		ld.size += len(block)
		n -= len(block)
		if err != nil {
			m.budget.give(n)
			return err
		}
	}
	return nil
}

// refuseLongData drops ld's data: its next execution fails with err.
func (m *stmtMemory) refuseLongData(ld *stmtLongData, err *mysql.MyError) {
	m.budget.give(ld.size)
	ld.params, ld.size, ld.refused = nil, 0, err
}

// dropLongData forgets statement id's long data (COM_STMT_RESET,
// COM_STMT_CLOSE).
func (m *stmtMemory) dropLongData(id uint32) {
	if ld := m.longData[id]; ld != nil {
		m.budget.give(ld.size)
		delete(m.longData, id)
	}
}

// fix returns the COM_STMT_EXECUTE payload to relay for the one in buf:
// the parameter types put in when it omits them (remembered when it
// carries them), values sent before as long data put in; or the error the
// execution fails with (its long data was refused).
func (m *stmtMemory) fix(payload []byte) ([][]byte, *mysql.MyError) {
	id := binary.LittleEndian.Uint32(payload[1:5])
	ld := m.longData[id]
	if ld != nil {
		m.dropLongData(id) // MySQL forgets long data at execution
		if ld.refused != nil {
			return nil, ld.refused
		}
	}
	out := m.fixTypes(payload)
	m.one[0] = out
	if ld == nil || len(ld.params) == 0 {
		return m.one[:], nil
	}
	sp := m.params[id]
	if sp == nil {
		return m.one[:], nil
	}
	return m.inline(out, sp.n, ld)
}

// inline returns the COM_STMT_EXECUTE payload (with types) with the long
// data values of ld written in as ordinary values, in pieces (no copy). A
// payload it cannot parse passes unchanged and is counted.
func (m *stmtMemory) inline(payload []byte, n int, ld *stmtLongData) ([][]byte, *mysql.MyError) {
	nb := (n + 7) >> 3
	flagAt := 10 + nb
	if n == 0 || len(payload) < flagAt+1+2*n || payload[flagAt] != 1 {
		m.count("stmt-execute-unfixable-long-data-unbound")
		return [][]byte{payload}, nil
	}
	nulls := payload[10:flagAt]
	types := payload[flagAt+1 : flagAt+1+2*n]
	head := flagAt + 1 + 2*n
	values := payload[head:]
	pieces := [][]byte{payload[:head]}
	total := head
	run, pos := 0, 0 // values[run:pos] are ordinary values not yet in pieces
	for i := range n {
		if nulls[i>>3]&(1<<(i&7)) != 0 {
			continue
		}
		if pd, ok := ld.params[uint16(i)]; ok {
			if run < pos {
				pieces = append(pieces, values[run:pos])
			}
			l := mysql.PutLengthEncodedInt(uint64(pd.size))
			pieces = append(append(pieces, l), pd.chunks...)
			total += len(l) + pd.size
			run = pos
			continue
		}
		size, ok := binaryValueSize(types[2*i], values[pos:])
		if !ok {
			m.count("stmt-execute-unfixable-long-data-unparsable")
			return [][]byte{payload}, nil
		}
		pos += size
		total += size
	}
	if run < pos {
		pieces = append(pieces, values[run:pos])
	}
	if total > m.maxPacket {
		m.count("packet-too-large")
		return nil, mysql.NewError(mysql.ER_NET_PACKET_TOO_LARGE, fmt.Sprintf(
			"causallab proxy: the execution with its long data put in is %d bytes, over max_allowed_packet (%d): the proxy sends long data inline", total, m.maxPacket))
	}
	return pieces, nil
}

// binaryValueSize is the length of the first value in b, a parameter of
// MySQL type typ in the binary protocol; false if b is too short.
func binaryValueSize(typ byte, b []byte) (int, bool) {
	size := 0
	switch typ {
	case mysql.MYSQL_TYPE_NULL:
		size = 0
	case mysql.MYSQL_TYPE_TINY:
		size = 1
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		size = 2
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_FLOAT:
		size = 4
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
		size = 8
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME:
		if len(b) < 1 {
			return 0, false
		}
		size = 1 + int(b[0])
	default: // strings, decimals, blobs, JSON, BIT, ENUM, SET, geometry
		l, hdr, ok := mysqlwire.LenencInt(b)
		if !ok || l > uint64(len(b)) {
			return 0, false
		}
		size = hdr + int(l)
	}
	if size > len(b) {
		return 0, false
	}
	return size, true
}

// fixTypes is fix's type rewrite of an execution's payload: a flag-0
// execution of a statement whose types it remembers gets them (the new
// payload is built in the memory's own buffer, alt).
func (m *stmtMemory) fixTypes(payload []byte) []byte {
	// cmd(1) stmt_id(4) flags(1) iteration_count(4) null_bitmap new_params_bound(1) [types] values
	if len(payload) < 10 {
		return payload
	}
	id := binary.LittleEndian.Uint32(payload[1:5])
	sp := m.params[id]
	if sp == nil || sp.n == 0 {
		return payload
	}
	nb := (sp.n + 7) >> 3
	flagAt := 10 + nb
	if len(payload) <= flagAt {
		return payload
	}
	switch payload[flagAt] {
	case 1:
		if len(payload) >= flagAt+1+2*sp.n {
			sp.types = append(sp.types[:0], payload[flagAt+1:flagAt+1+2*sp.n]...)
		}
	case 0:
		if len(sp.types) != 2*sp.n {
			m.count("stmt-execute-unfixable-types-never-sent")
			return payload
		}
		if cap(m.alt) > keepMax {
			m.alt = nil
		}
		out := m.alt[:0]
		if cap(out) < len(payload)+len(sp.types) {
			out = make([]byte, 0, len(payload)+len(sp.types))
		}
		out = append(out, payload[:flagAt]...)
		out = append(out, 1)
		out = append(out, sp.types...)
		out = append(out, payload[flagAt+1:]...)
		m.alt = out // kept: no allocation once it is big enough
		return out
	}
	return payload
}

// budgetHolder is who would hold too much past key: the session, or all
// of them.
func budgetHolder(key string) string {
	if key == "max_total_session_bytes" {
		return "the proxy's sessions together"
	}
	return "the session"
}
