package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/internal/rawnet"
)

// backendConn is one connection from a client session to one server.
type backendConn struct {
	b    *Backend
	conn *client.Conn
	// broken is set after an I/O error: the connection is unusable.
	broken bool
	// used is when a command was last sent (closedWhileIdle).
	used time.Time
	// buf is reused for relayed packets; head and pieces build the
	// command sent (relayReq.cmd).
	buf    []byte
	head   [5]byte
	pieces [][]byte
}

// BackendError is a failure to reach or talk to a backend. It never holds
// the backend's credentials.
type BackendError struct {
	// Backend is the server's configured name.
	Backend string
	// Op is what failed: "connect", "query", "replay".
	Op string
	// Msg is the sanitised cause.
	Msg string
	// Code and State are the server's error code and SQLSTATE when the
	// server refused (0 and "" for a network failure).
	Code  uint16
	State string
}

func (e *BackendError) Error() string {
	return fmt.Sprintf("proxy: backend %s: %s: %s", e.Backend, e.Op, e.Msg)
}

// backendErr builds a BackendError from err with b's user name and password
// scrubbed from its text.
func backendErr(b *Backend, op string, err error) *BackendError {
	msg := err.Error()
	var (
		me    *mysql.MyError
		code  uint16
		state string
	)
	if errors.As(err, &me) {
		code, state = me.Code, me.State
		if me.Code == mysql.ER_ACCESS_DENIED_ERROR {
			msg = "access denied for the proxy's backend account"
		}
	}
	if b.Password != "" {
		msg = strings.ReplaceAll(msg, b.Password, "***")
	}
	if b.User != "" && len(b.User) > 2 {
		msg = strings.ReplaceAll(msg, "'"+b.User+"'", "'***'")
	}
	return &BackendError{Backend: b.Name, Op: op, Msg: msg, Code: code, State: state}
}

// dialBackend opens a connection to b with session tracking on and the
// capabilities the raw relay needs: the classic EOF packets (clients of the
// proxy never get CLIENT_DEPRECATE_EOF) and no query attributes.
// flags are client capabilities passed on (session.flags).
func dialBackend(ctx context.Context, b *Backend, db string, collation string, flags uint32, cfg *Config) (*backendConn, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	d := &net.Dialer{Timeout: cfg.ConnectTimeout}
	dial := d.DialContext
	if cfg.SocketIO == "raw" {
		dial = rawnet.WrapDial(dial)
	}
	c, err := client.ConnectWithDialer(dctx, "", b.Addr, b.User, b.Password, db, dial, func(c *client.Conn) error {
		c.UnsetCapability(mysql.CLIENT_DEPRECATE_EOF | mysql.CLIENT_QUERY_ATTRIBUTES)
		if collation != "" {
			if err := c.SetCollation(collation); err != nil {
				return err
			}
		}
		caps := []uint32{mysql.CLIENT_SESSION_TRACK, mysql.CLIENT_MULTI_RESULTS, mysql.CLIENT_PS_MULTI_RESULTS}
		for _, f := range []uint32{mysql.CLIENT_MULTI_STATEMENTS, mysql.CLIENT_FOUND_ROWS, mysql.CLIENT_LOCAL_FILES} {
			if flags&f != 0 {
				caps = append(caps, f)
			}
		}
		for _, f := range caps {
			if err := c.SetCapability(f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, backendErr(b, "connect", err)
	}
	if caps := mysqlwire.CapsOf(c); caps != (mysqlwire.Caps{}) {
		// The raw relay and the pipelined watermark read classic framing.
		c.Close()
		return nil, backendErr(b, "connect", fmt.Errorf("server forced capabilities the relay cannot frame: %+v", caps))
	}
	if _, err := c.Execute("SET SESSION session_track_gtids = OWN_GTID"); err != nil {
		c.Close()
		return nil, backendErr(b, "connect", err)
	}
	return &backendConn{b: b, conn: c, buf: make([]byte, 0, 4096), used: time.Now()}, nil
}

func (bc *backendConn) close() {
	if bc != nil && bc.conn != nil {
		_ = bc.conn.Close()
	}
}

// exec runs a statement whose result the proxy consumes itself.
func (bc *backendConn) exec(query string) (*mysql.Result, error) {
	bc.used = time.Now()
	r, err := bc.conn.Execute(query)
	if err != nil {
		var me *mysql.MyError
		if !errors.As(err, &me) {
			bc.broken = true
		}
		return nil, err
	}
	return r, nil
}

// setOption sends COM_SET_OPTION and reads its answer (EOF, or the
// server's error).
func (bc *backendConn) setOption(opt uint16) error {
	c := bc.conn
	c.ResetSequence()
	bc.used = time.Now()
	if err := c.WritePacket([]byte{0, 0, 0, 0, mysql.COM_SET_OPTION, byte(opt), byte(opt >> 8)}); err != nil {
		bc.broken = true
		return err
	}
	pkt, err := c.ReadPacket()
	if err != nil {
		bc.broken = true
		return err
	}
	if len(pkt) > 0 && pkt[0] == mysql.ERR_HEADER {
		return c.HandleErrorPacket(pkt)
	}
	return nil
}
