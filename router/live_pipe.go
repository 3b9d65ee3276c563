package router

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/okpacket"
)

// ExecutedQuery reads a server's executed GTID set. Run right after a read
// on the same connection, its answer contains everything the read could
// observe: the sound monotonic-reads watermark.
const ExecutedQuery = "SELECT @@GLOBAL.gtid_executed"

// pipeConn is a read-pool connection's socket that can append one more
// command to the next write: the watermark query then leaves in the same
// system call as the read, and the server runs it right after the read,
// with no round trip of its own. Only the goroutine holding the pooled
// connection touches it.
type pipeConn struct {
	net.Conn
	// next is the packet (header included) appended to the next Write.
	next []byte
	buf  []byte
	// caps are the connection's negotiated capabilities.
	caps Caps
	// stmts caches the statements prepared on this connection for reads
	// with arguments, by text (at most maxCachedStmts): such a read is
	// then one COM_STMT_EXECUTE instead of go-mysql's prepare, execute
	// and close, and its watermark can be pipelined like a text read's.
	stmts map[string]*client.Stmt
}

// maxCachedStmts bounds each read-pool connection's statement cache (the
// server's max_prepared_stmt_count, 16382 by default, is shared by every
// connection).
const maxCachedStmts = 64

// stmt returns query prepared on c, from the cache or prepared now. A full
// cache is emptied first (its statements closed on the server).
func (p *pipeConn) stmt(ctx context.Context, c *client.Conn, query string) (*client.Stmt, error) {
	if st, ok := p.stmts[query]; ok {
		return st, nil
	}
	if len(p.stmts) >= maxCachedStmts {
		for q, st := range p.stmts {
			_ = st.Close() // no response: a broken connection shows at the next read
			delete(p.stmts, q)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	st, err := c.Prepare(query)
	if !stop() {
		if err == nil {
			_ = st.Close()
		}
		return nil, ctx.Err()
	}
	if err != nil {
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
func (p *pipeConn) forget(query string) {
	if st, ok := p.stmts[query]; ok {
		_ = st.Close()
		delete(p.stmts, query)
	}
}

// Write writes b, one packet (go-mysql writes a packet per call), with the
// pending command behind it when b is a command's last packet: a packet of
// 0xffffff payload bytes is continued by the next one.
func (p *pipeConn) Write(b []byte) (int, error) {
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

// installPipe puts a pipeConn under c's packet connection.
func installPipe(c *client.Conn) {
	if _, ok := c.Conn.Conn.(*pipeConn); !ok {
		c.Conn.Conn = &pipeConn{Conn: c.Conn.Conn, caps: CapsOf(c)}
	}
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

// executedPacket is ExecutedQuery as a COM_QUERY packet for c, sequence
// 0: with CLIENT_QUERY_ATTRIBUTES negotiated, COM_QUERY carries a
// parameter count (0) and a parameter set count (1) before the text.
func executedPacket(caps Caps) []byte {
	p := []byte{0, 0, 0, 0, mysql.COM_QUERY}
	if caps.QueryAttributes {
		p = append(p, 0, 1)
	}
	p = append(p, ExecutedQuery...)
	n := len(p) - 4
	p[0], p[1], p[2] = byte(n), byte(n>>8), byte(n>>16)
	return p
}

// execWithWatermark runs a read on c (a text query, or with args the
// connection's cached prepared statement) with, when wantWM,
// ExecutedQuery pipelined behind it, and returns the read's result and the
// node's executed set read right after it. A server error of the read is
// returned with the watermark's answer consumed, so c stays usable.
func execWithWatermark(ctx context.Context, c *client.Conn, pc *pipeConn, wantWM bool, query string, args ...any) (*mysql.Result, gtid.Set, error) {
	var st *client.Stmt
	if len(args) > 0 {
		var err error
		if st, err = pc.stmt(ctx, c, query); err != nil {
			return nil, gtid.Set{}, err
		}
		if n := st.ParamNum(); n != len(args) {
			// The caller's mistake, caught before anything is sent: not a
			// node fault (no hold-down, no retry elsewhere), and the
			// connection stays usable.
			return nil, gtid.Set{}, &RunError{Err: fmt.Errorf("%w: %q takes %d, got %d", ErrArgCount, truncate(query), n, len(args))}
		}
	}
	if wantWM {
		pc.next = executedPacket(pc.caps)
	}
	var (
		res *mysql.Result
		err error
	)
	if st != nil {
		res, err = stmtExecCtx(ctx, c, st, args...)
		if err != nil {
			pc.forget(query) // re-prepared next time (e.g. after ER_NEED_REPREPARE)
		}
	} else {
		res, err = execCtx(ctx, c, query)
	}
	if !wantWM {
		return res, gtid.Set{}, err
	}
	if pc.next != nil { // nothing was written
		pc.next = nil
		return nil, gtid.Set{}, err
	}
	var me *mysql.MyError
	if err != nil && !errors.As(err, &me) {
		return nil, gtid.Set{}, err // broken: the caller closes c
	}
	wm, werr := readExecutedAnswerCtx(ctx, c, pc.caps)
	if err != nil {
		if werr != nil && !isServerErr(werr) {
			return nil, gtid.Set{}, werr
		}
		return nil, gtid.Set{}, err
	}
	return res, wm, werr
}

// stmtExecCtx is execCtx for a prepared statement.
func stmtExecCtx(ctx context.Context, c *client.Conn, st *client.Stmt, args ...any) (*mysql.Result, error) {
	return withCtx(ctx, c, func() (*mysql.Result, error) { return st.Execute(args...) })
}

func isServerErr(err error) bool {
	var me *mysql.MyError
	return errors.As(err, &me)
}

func readExecutedAnswerCtx(ctx context.Context, c *client.Conn, caps Caps) (gtid.Set, error) {
	if err := ctx.Err(); err != nil {
		return gtid.Set{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	set, err := ReadExecutedAnswer(c, caps)
	if !stop() {
		if err == nil {
			err = ctx.Err()
		} else {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return gtid.Set{}, err
	}
	return set, err
}

// ReadExecutedAnswer reads, on c, the answer to an ExecutedQuery that was
// written behind another command (pipelined) after that command's
// response was read: a one-row, one-column result set, in classic or
// CLIENT_DEPRECATE_EOF framing as caps say. A *mysql.MyError is the server's
// refusal, after which c is still in step; any other error leaves c
// unusable.
func ReadExecutedAnswer(c *client.Conn, caps Caps) (gtid.Set, error) {
	c.Sequence = 1 // a response's first packet
	pkt, err := c.ReadPacket()
	if err != nil {
		return gtid.Set{}, err
	}
	if len(pkt) == 0 {
		return gtid.Set{}, errors.New("watermark: empty packet")
	}
	if pkt[0] == mysql.ERR_HEADER {
		return gtid.Set{}, serverError(pkt)
	}
	n, _, ok := okpacket.LenencInt(pkt)
	if !ok {
		return gtid.Set{}, errors.New("watermark: bad column count")
	}
	for i := uint64(0); i < n; i++ { // column definitions
		if _, err := c.ReadPacket(); err != nil {
			return gtid.Set{}, err
		}
	}
	deprecateEOF := caps.DeprecateEOF
	if !deprecateEOF {
		if _, err := c.ReadPacket(); err != nil { // EOF after the columns
			return gtid.Set{}, err
		}
	}
	var (
		text  string
		found bool
	)
	for {
		if pkt, err = c.ReadPacket(); err != nil {
			return gtid.Set{}, err
		}
		if len(pkt) == 0 {
			return gtid.Set{}, errors.New("watermark: empty packet")
		}
		if pkt[0] == mysql.EOF_HEADER && (len(pkt) < 9 || deprecateEOF && len(pkt) < mysql.MaxPayloadLen) {
			break
		}
		if pkt[0] == mysql.ERR_HEADER {
			return gtid.Set{}, serverError(pkt)
		}
		if !found {
			v, _, ok := okpacket.LenencStr(pkt)
			if !ok {
				return gtid.Set{}, errors.New("watermark: unreadable @@GLOBAL.gtid_executed row")
			}
			text, found = strings.Clone(string(v)), true
		}
	}
	if !found {
		return gtid.Set{}, errors.New("watermark: @@GLOBAL.gtid_executed returned no row")
	}
	set, err := gtid.Parse(text)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("watermark: %w", err)
	}
	return set, nil
}

// serverError parses an ERR packet (go-mysql's HandleErrorPacket indexes
// past the end of a short one). A packet too short to hold a code is not
// the server's refusal but a broken stream.
func serverError(pkt []byte) error {
	if len(pkt) < 3 {
		return errors.New("watermark: short ERR packet")
	}
	e := &mysql.MyError{Code: binary.LittleEndian.Uint16(pkt[1:3])}
	rest := pkt[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State, rest = string(rest[1:6]), rest[6:]
	}
	e.Message = string(rest)
	return e
}
