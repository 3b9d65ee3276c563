package mysqlwire

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// PollConn is a connection that answers one-value text queries, a
// position poller's: after go-mysql's handshake (Dialer.DialPoll) it
// speaks raw packets itself. A query's COM_QUERY packet is built once
// (the poller sends the same statement every time), the answer is read
// into a small buffer the connection keeps and parsed in place
// (ParseValueAnswer), so an exchange allocates nothing; go-mysql's
// client would allocate a result set, its fields and rows, and its
// context watch, on every poll. Every exchange runs under a deadline on
// the socket (Value's, set as the DeadlineConn's limit: one deadline
// change per exchange, no timer or context of its own), and the dial's
// context cuts the connection when it ends. Only one goroutine at a
// time may run exchanges.
type PollConn struct {
	c  *client.Conn
	dc *DeadlineConn
	// caps: the framing the connection negotiated.
	caps Caps
	// q is the query whose packet out holds.
	q   string
	out []byte
	// in is the read buffer (grown to fit an answer, kept).
	in []byte
	// stop ends the dial context's watch.
	stop func() bool
}

// PollReadBuffer is a PollConn's initial read buffer: an answer of a few
// GTID intervals fits it many times over; a larger one grows it.
const PollReadBuffer = 2 << 10

// MaxPollAnswer bounds one answer a PollConn reads (a GTID set of many
// thousand servers fits; a server that sends more is refused).
const MaxPollAnswer = 16 << 20

// DialPoll opens a PollConn to addr. When ctx ends, the connection is cut
// (an exchange in flight fails at once); close it all the same. An
// exchange's bound is Value's deadline, and every read and write also
// has d.IOTimeout's (DeadlineConn).
func (d *Dialer) DialPoll(ctx context.Context, addr string) (*PollConn, error) {
	c, err := d.Dial(ctx, addr, false)
	if err != nil {
		return nil, err
	}
	dc, ok := c.Conn.Conn.(*DeadlineConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("mysqlwire: poll connection to %s: socket is a %T, not a *DeadlineConn", addr, c.Conn.Conn)
	}
	p := &PollConn{c: c, dc: dc, caps: CapsOf(c), in: make([]byte, PollReadBuffer)}
	p.stop = context.AfterFunc(ctx, func() { dc.Cut(context.Cause(ctx)) })
	return p, nil
}

// Close ends the connection (COM_QUIT, then the socket).
func (p *PollConn) Close() error {
	p.stop()
	return p.c.Close()
}

// ReadValue runs query and returns the first column of its first row as
// text (NULL: ""), as the package's ReadValue does on a go-mysql
// connection: bounded by ctx's deadline, cut when ctx ends.
func (p *PollConn) ReadValue(ctx context.Context, query string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	stop := context.AfterFunc(ctx, func() { p.dc.Cut(context.Cause(ctx)) })
	dl, _ := ctx.Deadline()
	v, err := p.Value(dl, query)
	if !stop() {
		if err == nil {
			err = context.Cause(ctx)
		} else {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
	}
	if err != nil {
		return "", err
	}
	return string(v), nil
}

// Value runs query by deadline (the zero time: the connection's
// IOTimeout only) and returns the first column of its first row (NULL:
// empty), in the connection's buffer: valid until the next exchange. A
// *mysql.MyError is the server's refusal, after which the connection is
// still in step; any other error leaves it unusable (close it). An
// exchange cut by the deadline returns an error that is
// context.DeadlineExceeded; one cut by the dial context's end, that
// context's cause.
func (p *PollConn) Value(deadline time.Time, query string) ([]byte, error) {
	if query != p.q {
		p.out = AppendQueryPacket(p.out[:0], p.caps, query)
		p.q = query
	}
	p.dc.Limit(deadline)
	v, err := p.exchange()
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if cut := p.dc.CutReason(); cut != nil {
			err = fmt.Errorf("%w (%v)", cut, err)
		} else if !deadline.IsZero() {
			err = fmt.Errorf("%w: %s: %w", context.DeadlineExceeded, Excerpt(query), err)
		}
	}
	return v, err
}

func (p *PollConn) exchange() ([]byte, error) {
	if _, err := p.dc.Write(p.out); err != nil {
		return nil, err
	}
	n := 0
	for {
		if n == len(p.in) {
			if len(p.in) >= MaxPollAnswer {
				return nil, fmt.Errorf("mysqlwire: poll answer longer than %d bytes", MaxPollAnswer)
			}
			p.in = append(p.in, make([]byte, len(p.in))...)
		}
		m, err := p.dc.Read(p.in[n:])
		n += m
		if err != nil {
			if n > 0 {
				return nil, fmt.Errorf("%w (after %d bytes of the answer: %q)", err, n, p.in[:min(n, 200)])
			}
			return nil, err
		}
		v, used, err := ParseValueAnswer(p.in[:n], p.caps)
		switch {
		case errors.Is(err, ErrShortAnswer):
			continue
		case err != nil && !IsServerError(err):
			return nil, err
		case used != n:
			// More than one answer: the stream is out of step.
			return nil, fmt.Errorf("mysqlwire: %d bytes after a poll answer", n-used)
		}
		return v, err
	}
}

// AppendQueryPacket appends query as a COM_QUERY packet, sequence 0, to
// b (QueryPacket's framing).
func AppendQueryPacket(b []byte, caps Caps, query string) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0, mysql.COM_QUERY)
	if caps.QueryAttributes {
		b = append(b, 0, 1)
	}
	b = append(b, query...)
	n := len(b) - at - 4
	b[at], b[at+1], b[at+2] = byte(n), byte(n>>8), byte(n>>16)
	return b
}

// ErrShortAnswer is ParseValueAnswer's verdict on a prefix of an answer:
// read more.
var ErrShortAnswer = errors.New("mysqlwire: answer incomplete")

// maxColumns is MySQL's limit of columns in a table (and a result set's
// sanity bound here).
const maxColumns = 4096

// ParseValueAnswer parses b, the bytes a server sent in answer to one
// COM_QUERY (packet headers included, in classic or CLIENT_DEPRECATE_EOF
// framing as caps say), and returns the first column of the first row
// (a sub-slice of b; NULL: nil) and how many bytes the answer took. A
// prefix of a valid answer gives ErrShortAnswer; an ERR packet gives the
// server's refusal (*mysql.MyError, with used its end: the stream is in
// step after it); anything else that is not one result set of at least
// one row is an error, the stream out of step. Payloads of 16 MiB - 1
// or more (split packets) are refused.
func ParseValueAnswer(b []byte, caps Caps) (value []byte, used int, err error) {
	var seq byte = 1
	next := func() ([]byte, error) {
		if len(b)-used < 4 {
			return nil, ErrShortAnswer
		}
		h := b[used : used+4]
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if h[3] != seq {
			return nil, fmt.Errorf("mysqlwire: answer packet sequence %d, want %d", h[3], seq)
		}
		if n == mysql.MaxPayloadLen {
			return nil, errors.New("mysqlwire: answer packet of 16 MiB or more")
		}
		if len(b)-used-4 < n {
			return nil, ErrShortAnswer
		}
		pkt := b[used+4 : used+4+n]
		used += 4 + n
		seq++
		return pkt, nil
	}
	pkt, err := next()
	if err != nil {
		return nil, 0, err
	}
	if len(pkt) == 0 {
		return nil, 0, errors.New("mysqlwire: empty answer packet")
	}
	switch pkt[0] {
	case mysql.ERR_HEADER:
		return nil, used, ServerError(pkt)
	case mysql.OK_HEADER:
		return nil, 0, errors.New("mysqlwire: the statement returned no result set")
	case 0xfb:
		return nil, 0, errors.New("mysqlwire: the server asked for a local file")
	}
	cols, n, ok := LenencInt(pkt)
	if !ok || n != len(pkt) || cols == 0 || cols > maxColumns {
		return nil, 0, fmt.Errorf("mysqlwire: bad column count packet %x", pkt[:min(len(pkt), 16)])
	}
	for range cols {
		if pkt, err = next(); err != nil {
			return nil, 0, err
		}
		if len(pkt) == 0 || pkt[0] == mysql.ERR_HEADER || pkt[0] == mysql.EOF_HEADER && len(pkt) < 9 {
			return nil, 0, errors.New("mysqlwire: bad column definition")
		}
	}
	if !caps.DeprecateEOF {
		if pkt, err = next(); err != nil {
			return nil, 0, err
		}
		if len(pkt) == 0 || pkt[0] != mysql.EOF_HEADER || len(pkt) >= 9 {
			return nil, 0, errors.New("mysqlwire: no EOF after the column definitions")
		}
	}
	found := false
	for {
		if pkt, err = next(); err != nil {
			return nil, 0, err
		}
		if len(pkt) == 0 {
			return nil, 0, errors.New("mysqlwire: empty row packet")
		}
		switch {
		case pkt[0] == mysql.EOF_HEADER && (len(pkt) < 9 || caps.DeprecateEOF):
			// The end: an EOF packet, or (CLIENT_DEPRECATE_EOF) an OK
			// packet with the EOF header (a row never starts with 0xfe
			// but as an 8-byte length, 9 bytes at least and more than
			// that with its text; the 16 MiB case is refused above).
			if !found {
				return nil, 0, errors.New("mysqlwire: the statement returned no row")
			}
			return value, used, nil
		case pkt[0] == mysql.ERR_HEADER:
			return nil, used, ServerError(pkt)
		case found:
			continue
		case pkt[0] == 0xfb: // NULL
			value, found = nil, true
		default:
			v, _, ok := LenencStr(pkt)
			if !ok {
				return nil, 0, errors.New("mysqlwire: unreadable row")
			}
			value, found = v, true
		}
	}
}
