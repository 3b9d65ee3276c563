package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// backendConn is one connection from a client session to one server.
type backendConn struct {
	b    *Backend
	conn *client.Conn
	// dc is the socket below conn: every read and write has a deadline
	// (Config.BackendTimeout), Limit bounds a wait by its budget, Cut
	// ends a read the watchdog gave up on.
	dc *mysqlwire.DeadlineConn
	// frames reads the socket under go-mysql's reader (InstallFrames):
	// the relay takes a response's packets from it in place
	// (relayResponse); nil: through go-mysql (packets not plain).
	frames *mysqlwire.FrameReader
	// broken is set after an I/O error: the connection is unusable.
	broken bool
	// used is when a command was last sent (closedWhileIdle).
	used time.Time
	// The watchdog (watch): while watched, every watchProbe the node's
	// health is checked (healthy) and the connection cut when it is
	// unhealthy. watched is the I/O goroutine's mirror of watching.
	wmu      sync.Mutex
	watching bool
	healthy  func() bool
	timer    *time.Timer
	watched  bool
	// buf is reused for relayed packets; head and pieces build the
	// command sent (relayReq.cmd).
	buf    []byte
	head   [6]byte
	pieces [][]byte
	// allGTIDs: the connection tracks session_track_gtids=ALL_GTIDS (a
	// replica connection under Config.WatermarkSource "all-gtids"): the
	// OK packet ending a result carries the server's whole executed set.
	allGTIDs bool
	// mariaDB: the backend is a MariaDB server (Config.Engine): a write's
	// GTID comes as the tracked system variable last_gtid.
	mariaDB bool
	// okEOF: the connection negotiated CLIENT_DEPRECATE_EOF (every
	// backend connection does): results end with an OK packet carrying
	// the session-tracking block (session_track_state_change), rewritten
	// to classic EOF framing for the client (relayResponse).
	okEOF bool
	// changed: a client statement relayed on the connection reported a
	// session state change (SERVER_SESSION_STATE_CHANGED with the
	// state-change tracker's entry): a pooled one is reset before it is
	// lent again, whatever its session's holds.
	changed bool
	// home is the pool that lent the connection (nil: the session's
	// own); close then frees its place there (pool.go). pooledDB and
	// pooledCollation are its schema and collation (borrow compares the
	// session's); replayed: session statements were replayed on it, so
	// it is reset when it goes back.
	home            *pool
	pooledDB        string
	pooledCollation string
	replayed        bool
	// pinnedIn is the pool whose pinned connections (max_pinned_share)
	// count this lent one; own the pool it was lent by before it became
	// the session's own, its session pinned past max_pinned_share
	// (pool.pin): closed when the pin ends (session.dropOwn).
	pinnedIn *pool
	own      *pool
	// pooledFlags are the client capabilities (passedFlags) a pooled
	// connection has: those it was dialled with, CLIENT_MULTI_STATEMENTS
	// as COM_SET_OPTION last left it. resetPending: a reset was written
	// (at resetSent) and its answers are still to be read (pool.go);
	// wasReset: a pool reset it once (session.unresetPrimary).
	pooledFlags  uint32
	resetPending bool
	wasReset     bool
	// pooledAcct is the account a pooled connection was dialled as (the
	// zero account: the node's own); fresh: dialled and not lent yet
	// (poolReq.fresh).
	pooledAcct account
	fresh      bool
	resetSent  time.Time
	// lent is when the pool lent the connection and lentFor what the
	// borrower needed it for (the hold-time metric's use label).
	lent    time.Time
	lentFor string
	// status is the server status of the connection's last OK or EOF
	// packet (the status of the EOF packet the relay writes after a
	// result's column definitions, which a DEPRECATE_EOF server omits).
	status uint16
	// run is the runState of the session a call is in flight for (bind
	// to unbind), nil otherwise.
	run *runState
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
	// server refused (0 and "" for a network failure; State "" too for a
	// refusal before the greeting, 1040, which carries none).
	Code  uint16
	State string
	// Text is the server's own message when it refused, with the
	// backend account's name and password scrubbed; "" when not the
	// server's, or withheld (1045 for the proxy's own account).
	Text string
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
	text := ""
	if errors.As(err, &me) {
		code, state, text = me.Code, me.State, me.Message
		if me.Code == mysql.ER_ACCESS_DENIED_ERROR {
			msg, text = "access denied for the proxy's backend account", ""
		}
	}
	return &BackendError{Backend: b.Name, Op: op, Msg: scrubUser(msg, b.User, b.Password), Code: code, State: state, Text: scrubUser(text, b.User, b.Password)}
}

// scrubUser takes password, and user where quoted as MySQL quotes an
// account, out of msg.
func scrubUser(msg, user, password string) string {
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "***")
	}
	if user != "" && len(user) > 2 {
		msg = strings.ReplaceAll(msg, "'"+user+"'", "'***'")
	}
	return msg
}

// scrubAccount takes acct's password out of e's text (the server's
// errors never carry one; the belt and braces of backendErr's).
func scrubAccount(e *BackendError, acct account) *BackendError {
	e.Msg = scrubUser(e.Msg, "", acct.password)
	e.Text = scrubUser(e.Text, "", acct.password)
	return e
}

// dialBackend opens a connection to b as acct (the zero account: b's
// own) with session tracking on and the capabilities the raw relay needs:
// CLIENT_DEPRECATE_EOF (a result ends with an OK packet, whose tracking
// block reports a session state change made by the statement, stored
// programs included; the relay rewrites the framing to the classic EOF
// packets, which clients of the proxy always get) and no query
// attributes; session_track_gtids=OWN_GTID, or ALL_GTIDS with allGTIDs,
// and session_track_state_change=ON (trackSetup).
// flags are client capabilities passed on (session.flags).
// The whole attempt (handshake and set-up) is bounded by connect_timeout
// and, when healthy is given (a replica), cut once the position source
// reports the server unhealthy.
// backendReadBuffer is the read buffer of a backend connection's
// FrameReader, which batches its socket reads (go-mysql's default is 64
// KiB, most of an idle session's memory without multiplexing:
// docs/benchmarks-proxy.md, "Where the heap goes"). A packet larger than
// it is assembled apart, so any size is correct; 16 KiB holds a point
// read's whole answer, as go-mysql's server side (packet.DefaultBufferSize)
// does for the client's. goMySQLReadBuffer is go-mysql's own buffer above
// it, which holds at most one packet at a time once the FrameReader is
// under it (and reads bigger ones through).
const (
	backendReadBuffer = 16 << 10
	goMySQLReadBuffer = 4 << 10
)

func dialBackend(ctx context.Context, b *Backend, acct account, db string, collation string, flags uint32, cfg *Config, healthy func() bool, allGTIDs bool) (*backendConn, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	var (
		dc   *mysqlwire.DeadlineConn
		stop = func() {}
	)
	defer func() { stop() }()
	dial := mysqlwire.DeadlineDial(&net.Dialer{Timeout: cfg.ConnectTimeout}, cfg.BackendTimeout, cfg.SocketIO != "raw", func(c *mysqlwire.DeadlineConn) {
		// go-mysql's handshake does not watch the context: the attempt's
		// timeout bounds it on the socket.
		dc = c
		c.Limit(time.Now().Add(cfg.ConnectTimeout))
		if healthy != nil {
			stop = watchDial(c, healthy)
		}
	})
	user, password := acct.on(b)
	c, err := client.ConnectWithDialer(dctx, "", b.Addr, user, password, db, dial, func(c *client.Conn) error {
		c.BufferSize = goMySQLReadBuffer
		// go-mysql asks for CLIENT_DEPRECATE_EOF by default.
		c.UnsetCapability(mysql.CLIENT_QUERY_ATTRIBUTES)
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
		return nil, scrubAccount(backendErr(b, "connect", err), acct)
	}
	// MySQL offers CLIENT_DEPRECATE_EOF since 5.7.5; a server that does
	// not (the unit tests' go-mysql doubles) gets the classic framing,
	// its results' state changes unseen (only OK packets report them).
	caps := mysqlwire.CapsOf(c)
	if caps.QueryAttributes || allGTIDs && !caps.DeprecateEOF {
		// The raw relay and the pipelined watermark read the framing
		// asked for.
		c.Close()
		return nil, backendErr(b, "connect", fmt.Errorf("server forced capabilities the relay cannot frame: %+v", caps))
	}
	if b == &cfg.Primary && !caps.DeprecateEOF && cfg.classicEOF != nil {
		// A primary whose server did not offer CLIENT_DEPRECATE_EOF: its
		// row-returning writes' GTIDs are not seen (counted).
		cfg.classicEOF.Inc()
	}
	if _, err := c.Execute(cfg.trackSetup(allGTIDs)); err != nil {
		c.Close()
		if errors.Is(dc.CutReason(), errUnresponsive) {
			err = errUnresponsive
		}
		return nil, backendErr(b, "connect", err)
	}
	stop()
	stop = func() {}
	dc.Limit(time.Time{})
	// Every answer so far was read whole: the relay's packet reader goes
	// under go-mysql's now (nil when the packets are not plain).
	frames := mysqlwire.InstallFrames(c, backendReadBuffer)
	return &backendConn{b: b, conn: c, dc: dc, frames: frames, buf: make([]byte, 0, 4096), used: time.Now(), allGTIDs: allGTIDs, mariaDB: cfg.mariaDB(), okEOF: caps.DeprecateEOF, status: mysql.SERVER_STATUS_AUTOCOMMIT}, nil
}

func (bc *backendConn) close() {
	if bc != nil && bc.home != nil {
		// A borrowed connection the session gives up: closed, and its
		// place in the pool freed.
		home := bc.home
		bc.home = nil
		home.discard(bc, discardSession)
		return
	}
	if bc != nil && bc.own != nil {
		bc.own.m.conns.WithLabelValues(bc.own.node, "own").Dec()
		bc.own = nil
	}
	if bc != nil && bc.conn != nil {
		bc.unwatch()
		_ = bc.conn.Close()
	}
}

// bind makes the end of ctx (the client session's) cut bc's socket: the
// read or write in progress, and every later one, fails at once. stop
// ends the binding. go-mysql's client calls take no context; every call
// on bc is made under a binding (do, exec, setOption, relayCmd), its
// deadlines bound it in time.
// A call made on a session's behalf is published as in flight
// (runState.enter) until unbind: KILL QUERY finds it there. One the
// session's command makes after a KILL QUERY reached it is not made:
// err is MySQL's 1317 (errInterrupted).
func (bc *backendConn) bind(ctx context.Context) (stop func() bool, err error) {
	if r := runOf(ctx); r != nil {
		if !r.enter(bc) {
			return noStop, errInterrupted
		}
		bc.run = r
	}
	if ctx == nil || ctx.Done() == nil || bc.dc == nil {
		return noStop, nil
	}
	return context.AfterFunc(ctx, func() { bc.dc.Cut(ctx.Err()) }), nil
}

// unbind ends what bind began: stop, and the call is no longer in flight
// (once a KILL QUERY of it in flight ran: runState.leave).
func (bc *backendConn) unbind(stop func() bool) {
	stop()
	if r := bc.run; r != nil {
		bc.run = nil
		r.leave(bc)
	}
}

func noStop() bool { return true }

// do runs f, a go-mysql client call on bc.conn (UseDB, Prepare,
// FieldList, a prepared statement's Execute), bound to ctx. An error
// that is not the server's leaves bc broken.
func (bc *backendConn) do(ctx context.Context, f func() error) error {
	bc.used = time.Now()
	stop, err := bc.bind(ctx)
	if err != nil {
		return err
	}
	err = f()
	bc.unbind(stop)
	var me *mysql.MyError
	if err != nil && !errors.As(err, &me) {
		bc.broken = true
	}
	return err
}

// exec runs a statement whose result the proxy consumes itself, bound to
// ctx.
func (bc *backendConn) exec(ctx context.Context, query string) (*mysql.Result, error) {
	bc.used = time.Now()
	stop, err := bc.bind(ctx)
	if err != nil {
		return nil, err
	}
	r, err := bc.conn.Execute(query)
	bc.unbind(stop)
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
// server's error), bound to ctx.
func (bc *backendConn) setOption(ctx context.Context, opt uint16) error {
	c := bc.conn
	c.ResetSequence()
	bc.used = time.Now()
	stop, err := bc.bind(ctx)
	if err != nil {
		return err
	}
	defer bc.unbind(stop)
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
	if opt == 0 { // MYSQL_OPTION_MULTI_STATEMENTS_ON
		bc.pooledFlags |= mysql.CLIENT_MULTI_STATEMENTS
	} else {
		bc.pooledFlags &^= mysql.CLIENT_MULTI_STATEMENTS
	}
	return nil
}

// errUnresponsive is the cut reason of a replica that did not start
// answering while the position source reported it unhealthy (watch).
var errUnresponsive = errors.New("the replica did not answer and its position source reports it unhealthy")

// watchProbe is how often a watched read checks its node's health.
const watchProbe = mysqlwire.WatchProbe

// watch starts the watchdog for a command about to be sent to a replica:
// until unwatch (the response's first packet, the wait's answer), the
// connection is cut (errUnresponsive) once healthy reports false. A read
// cut before anything reached the client is decided again elsewhere.
func (bc *backendConn) watch(healthy func() bool) {
	bc.wmu.Lock()
	bc.watching, bc.healthy, bc.watched = true, healthy, true
	if bc.timer == nil {
		bc.timer = time.AfterFunc(watchProbe, bc.probe)
	} else {
		bc.timer.Reset(watchProbe)
	}
	bc.wmu.Unlock()
}

// unwatch stops the watchdog.
func (bc *backendConn) unwatch() {
	if !bc.watched {
		return
	}
	bc.watched = false
	bc.wmu.Lock()
	bc.watching = false
	bc.wmu.Unlock()
	bc.timer.Stop()
}

// probe is the watchdog's check (its timer's goroutine).
func (bc *backendConn) probe() {
	bc.wmu.Lock()
	defer bc.wmu.Unlock()
	if !bc.watching {
		return
	}
	if bc.healthy() {
		bc.timer.Reset(watchProbe)
		return
	}
	bc.watching = false
	bc.dc.Cut(errUnresponsive)
}

// unresponsive reports whether the watchdog cut the connection.
func (bc *backendConn) unresponsive() bool {
	return bc.dc != nil && errors.Is(bc.dc.CutReason(), errUnresponsive)
}

// killQuery runs KILL QUERY id on b on a connection of its own, or one
// borrowed from p (multiplex), bounded by connect_timeout.
func killQuery(ctx context.Context, b *Backend, id uint32, cfg *Config, p *pool) error {
	kctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if p != nil {
		return p.kill(kctx, id)
	}
	d := &mysqlwire.Dialer{User: b.User, Password: b.Password, Timeout: cfg.ConnectTimeout, IOTimeout: cfg.ConnectTimeout, PlainIO: cfg.SocketIO != "raw"}
	c, err := d.Dial(kctx, b.Addr, false)
	if err != nil {
		return backendErr(b, "kill", err)
	}
	defer c.Close()
	if _, err := mysqlwire.Exec(kctx, c, "KILL QUERY "+strconv.FormatUint(uint64(id), 10)); err != nil {
		var me *mysql.MyError
		if errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_THREAD {
			return nil // the wait ended meanwhile
		}
		return backendErr(b, "kill", err)
	}
	return nil
}

// watchDial cuts dc (errUnresponsive) once healthy reports false
// (mysqlwire.WatchHealth), until stop.
func watchDial(dc *mysqlwire.DeadlineConn, healthy func() bool) (stop func()) {
	return mysqlwire.WatchHealth(healthy, func() { dc.Cut(errUnresponsive) })
}
