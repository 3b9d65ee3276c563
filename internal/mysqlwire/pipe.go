package mysqlwire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
)

// PipeConn is a connection's socket that can append one more command to
// the next write: a follow-up query (the executed position read right
// after a read, the sound monotonic-reads watermark) then leaves in the
// same system call as the command before it, and the server runs it right
// after, with no round trip of its own. Only the goroutine holding the
// connection touches it.
type PipeConn struct {
	net.Conn
	// next is the packet (header included) appended to the next Write.
	next []byte
	buf  []byte
	// caps are the connection's negotiated capabilities.
	caps Caps
	// stmts caches the statements prepared on this connection for reads
	// with arguments, by text (at most MaxCachedStmts): such a read is
	// then one COM_STMT_EXECUTE instead of go-mysql's prepare, execute
	// and close, and its follow-up can be pipelined like a text read's.
	stmts map[string]*client.Stmt
}

// MaxCachedStmts bounds each connection's statement cache (the server's
// max_prepared_stmt_count, 16382 by default, is shared by every
// connection).
const MaxCachedStmts = 64

// ErrArgCount is returned for a statement whose arguments do not match its
// placeholders. It is the caller's error: the connection stays usable.
var ErrArgCount = errors.New("router: wrong number of arguments for the statement's placeholders")

// InstallPipe puts a PipeConn under c's packet connection (idempotent).
func InstallPipe(c *client.Conn) *PipeConn {
	if p, ok := c.Conn.Conn.(*PipeConn); ok {
		return p
	}
	p := &PipeConn{Conn: c.Conn.Conn, caps: CapsOf(c)}
	c.Conn.Conn = p
	return p
}

// PipeOf returns c's PipeConn, if InstallPipe put one there.
func PipeOf(c *client.Conn) (*PipeConn, bool) {
	p, ok := c.Conn.Conn.(*PipeConn)
	return p, ok
}

// stmt returns query prepared on c, from the cache or prepared now. A full
// cache is emptied first (its statements closed on the server).
func (p *PipeConn) stmt(ctx context.Context, c *client.Conn, query string) (*client.Stmt, error) {
	if st, ok := p.stmts[query]; ok {
		return st, nil
	}
	if len(p.stmts) >= MaxCachedStmts {
		for q, st := range p.stmts {
			_ = st.Close() // no response: a broken connection shows at the next read
			delete(p.stmts, q)
		}
	}
	st, err := WithCtx(ctx, c, func() (*client.Stmt, error) { return c.Prepare(query) })
	if err != nil {
		if st != nil {
			_ = st.Close()
		}
		return nil, err
	}
	if p.stmts == nil {
		p.stmts = map[string]*client.Stmt{}
	}
	p.stmts[query] = st
	return st, nil
}

// forget drops query's cached statement (after an error on it) and closes
// it on the server.
func (p *PipeConn) forget(query string) {
	if st, ok := p.stmts[query]; ok {
		_ = st.Close()
		delete(p.stmts, query)
	}
}

// Write writes b, one packet (go-mysql writes a packet per call), with the
// pending command behind it when b is a command's last packet: a packet of
// 0xffffff payload bytes is continued by the next one.
func (p *PipeConn) Write(b []byte) (int, error) {
	if len(p.next) == 0 || len(b) < 4 || b[0] == 0xff && b[1] == 0xff && b[2] == 0xff {
		return p.Conn.Write(b)
	}
	p.buf = append(append(p.buf[:0], b...), p.next...)
	p.next = nil
	n, err := p.Conn.Write(p.buf)
	if cap(p.buf) > 64<<10 {
		p.buf = nil
	}
	return min(n, len(b)), err
}

// Caps are the capabilities a connection negotiated that change the
// framing of a pipelined command and its answer.
type Caps struct {
	// DeprecateEOF: result sets end with an OK packet, with no EOF after
	// the column definitions.
	DeprecateEOF bool
	// QueryAttributes: COM_QUERY carries query attributes before the text.
	QueryAttributes bool
}

// CapsOf reads c's negotiated capabilities. go-mysql v1.16.0 exports them
// only as CapabilityString (HasCapability reports what the client asked
// for, not what the server granted).
func CapsOf(c *client.Conn) Caps {
	var caps Caps
	for _, name := range strings.Split(c.CapabilityString(), "|") {
		switch name {
		case "CLIENT_DEPRECATE_EOF":
			caps.DeprecateEOF = true
		case "CLIENT_QUERY_ATTRIBUTES":
			caps.QueryAttributes = true
		}
	}
	return caps
}

// QueryPacket is query as a COM_QUERY packet, sequence 0: with
// CLIENT_QUERY_ATTRIBUTES negotiated, COM_QUERY carries a parameter count
// (0) and a parameter set count (1) before the text.
func QueryPacket(caps Caps, query string) []byte {
	p := []byte{0, 0, 0, 0, mysql.COM_QUERY}
	if caps.QueryAttributes {
		p = append(p, 0, 1)
	}
	p = append(p, query...)
	n := len(p) - 4
	p[0], p[1], p[2] = byte(n), byte(n>>8), byte(n>>16)
	return p
}

// ExecPipelined runs a statement on c (a text query, or with args the
// connection's cached prepared statement) with, when follow is not "",
// the query follow pipelined behind it, and returns the statement's result
// and the first column of the first row of follow's answer (read right
// after the statement's result). A server error of the statement is
// returned with follow's answer consumed, so c stays usable; so is an
// ErrArgCount, caught before anything is sent. c must have a PipeConn
// (InstallPipe).
func ExecPipelined(ctx context.Context, c *client.Conn, follow string, query string, args ...any) (*mysql.Result, string, error) {
	p, ok := PipeOf(c)
	if !ok {
		return nil, "", errors.New("mysqlwire: ExecPipelined on a connection without a PipeConn")
	}
	var st *client.Stmt
	if len(args) > 0 {
		var err error
		if st, err = p.stmt(ctx, c, query); err != nil {
			return nil, "", err
		}
		if n := st.ParamNum(); n != len(args) {
			return nil, "", fmt.Errorf("%w: %q takes %d, got %d", ErrArgCount, Excerpt(query), n, len(args))
		}
	}
	if follow != "" {
		p.next = QueryPacket(p.caps, follow)
	}
	var (
		res *mysql.Result
		err error
	)
	if st != nil {
		res, err = StmtExec(ctx, c, st, args...)
		if err != nil {
			p.forget(query) // re-prepared next time (e.g. after ER_NEED_REPREPARE)
		}
	} else {
		res, err = Exec(ctx, c, query)
	}
	if follow == "" {
		return res, "", err
	}
	if p.next != nil { // nothing was written
		p.next = nil
		return nil, "", err
	}
	if err != nil && !IsServerError(err) {
		return nil, "", err // broken: the caller closes c
	}
	v, verr := WithCtx(ctx, c, func() (string, error) { return ReadValueAnswer(c, p.caps) })
	if err != nil {
		if verr != nil && !IsServerError(verr) {
			return nil, "", verr
		}
		return nil, "", err
	}
	return res, v, verr
}

// ReadValueAnswer reads, on c, the answer to a one-value query that was
// written behind another command (pipelined) after that command's
// response was read: a result set in classic or CLIENT_DEPRECATE_EOF
// framing as caps say, of which it returns the first column of the first
// row (a copy). A *mysql.MyError is the server's refusal, after which c is
// still in step; any other error leaves c unusable.
func ReadValueAnswer(c *client.Conn, caps Caps) (string, error) {
	c.Sequence = 1 // a response's first packet
	pkt, err := c.ReadPacket()
	if err != nil {
		return "", err
	}
	if len(pkt) == 0 {
		return "", errors.New("pipelined answer: empty packet")
	}
	if pkt[0] == mysql.ERR_HEADER {
		return "", ServerError(pkt)
	}
	n, _, ok := LenencInt(pkt)
	if !ok {
		return "", errors.New("pipelined answer: bad column count")
	}
	for i := uint64(0); i < n; i++ { // column definitions
		if _, err := c.ReadPacket(); err != nil {
			return "", err
		}
	}
	deprecateEOF := caps.DeprecateEOF
	if !deprecateEOF {
		if _, err := c.ReadPacket(); err != nil { // EOF after the columns
			return "", err
		}
	}
	var (
		text  string
		found bool
	)
	for {
		if pkt, err = c.ReadPacket(); err != nil {
			return "", err
		}
		if len(pkt) == 0 {
			return "", errors.New("pipelined answer: empty packet")
		}
		if pkt[0] == mysql.EOF_HEADER && (len(pkt) < 9 || deprecateEOF && len(pkt) < mysql.MaxPayloadLen) {
			break
		}
		if pkt[0] == mysql.ERR_HEADER {
			return "", ServerError(pkt)
		}
		if !found {
			v, _, ok := LenencStr(pkt)
			if !ok {
				return "", errors.New("pipelined answer: unreadable row")
			}
			text, found = strings.Clone(string(v)), true
		}
	}
	if !found {
		return "", errors.New("pipelined answer: no row")
	}
	return text, nil
}

// ReadExecutedAnswer is ReadValueAnswer for a pipelined ExecutedQuery: the
// answer parsed as a GTID set.
func ReadExecutedAnswer(c *client.Conn, caps Caps) (gtid.Set, error) {
	text, err := ReadValueAnswer(c, caps)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("watermark: %w", err)
	}
	set, err := gtid.Parse(text)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("watermark: %w", err)
	}
	return set, nil
}

// ServerError parses an ERR packet (go-mysql's HandleErrorPacket indexes
// past the end of a short one). A packet too short to hold a code is not
// the server's refusal but a broken stream.
func ServerError(pkt []byte) error {
	if len(pkt) < 3 {
		return errors.New("short ERR packet")
	}
	e := &mysql.MyError{Code: binary.LittleEndian.Uint16(pkt[1:3])}
	rest := pkt[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State, rest = string(rest[1:6]), rest[6:]
	}
	e.Message = string(rest)
	return e
}
