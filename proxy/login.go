package proxy

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
)

// loginHandler is go-mysql's AuthenticationHandler for one client
// connection.
//
// An unknown user gets a decoy credential no password matches, so it is
// refused by the same path, with the same ER_ACCESS_DENIED_ERROR (1045), as
// a known user with a wrong password: go-mysql itself would answer an
// unknown user with 1449 (ER_NO_SUCH_USER), telling the client which user
// names exist. MySQL also authenticates unknown users against a fake
// account.
//
// After authentication, and before go-mysql sends the login's OK, it opens
// the session's primary connection (session.start): a backend failure is
// then the login's answer, with the backend's own error code (1040 stays
// 1040), instead of an OK followed by an error nobody asked for.
var _ server.AuthenticationHandler = (*loginHandler)(nil)

type loginHandler struct {
	srv  *Server
	sess *session
	// backendFailed: authentication passed, the session's backend
	// connection did not; refused: authentication passed, a bound
	// (max_connections, max_user_connections) refused the login (counted
	// where refused).
	backendFailed bool
	refused       bool
	// denied: under auth passthrough the primary refused the account
	// (counted as an authentication failure).
	denied bool
	// hc is the client's connection below go-mysql's (refuse).
	hc *handshakeConn
}

// GetCredential returns the user's credential, or the decoy.
func (h *loginHandler) GetCredential(user string) (server.Credential, bool, error) {
	if c, ok := h.srv.users[user]; ok {
		return c, true, nil
	}
	return h.srv.decoy, true, nil
}

// OnAuthSuccess connects the session to the primary. handshake_timeout
// bounds the client's side of the login; the primary connection has its
// own connect_timeout, added to the client's deadline (the OK, or the
// backend's error, is written after it).
//
// The connection leaves the handshakes and is counted as a session of
// its account first (Server.graduate): a login past max_connections or
// max_user_connections is refused before the primary is dialled.
func (h *loginHandler) OnAuthSuccess(c *server.Conn) error {
	_ = c.SetDeadline(time.Now().Add(h.srv.cfg.ConnectTimeout + h.srv.cfg.HandshakeTimeout))
	if err := h.srv.graduate(h.sess.slot, c.GetUser()); err != nil {
		h.refused = true
		return err
	}
	if h.srv.cfg.Auth == AuthMapped {
		h.sess.acct = h.srv.mappedAccount(c.GetUser())
	}
	if err := h.sess.start(c); err != nil {
		if h.srv.cfg.Auth == AuthPassthrough && backendDenied(err) {
			// The server's verdict on the account, worded as the proxy's
			// own refusals (no difference between an unknown user and a
			// wrong password).
			h.denied = true
			return accessDenied(c.GetUser(), c.RemoteAddr().String(), h.sess.acct.password != "")
		}
		h.backendFailed = true
		return h.refuse(c, loginError(err))
	}
	return nil
}

// backendDenied: err is a server's ER_ACCESS_DENIED_ERROR (1045) when a
// backend connection was opened.
func backendDenied(err error) bool {
	var be *BackendError
	if errors.As(err, &be) {
		return be.Code == mysql.ER_ACCESS_DENIED_ERROR
	}
	var me *mysql.MyError
	return errors.As(err, &me) && me.Code == mysql.ER_ACCESS_DENIED_ERROR
}

// OnAuthFailure is informational; the connection closes.
func (h *loginHandler) OnAuthFailure(*server.Conn, error) {}

// handshakeHandler is the server.Handler go-mysql's server is given for
// the login: during the handshake it calls UseDB with the database the
// client named; the session's commands never reach go-mysql (the
// session's loop reads them, session.handleNextCommand), so every other
// method refuses.
type handshakeHandler struct{ sess *session }

var _ server.Handler = handshakeHandler{}

var errNotGoMySQL = errors.New("proxy: commands are not handled by go-mysql's server")

// UseDB records the handshake's database: the session's connections
// open in it.
func (h handshakeHandler) UseDB(db string) error {
	h.sess.state.db = strings.Clone(db)
	return nil
}

func (handshakeHandler) HandleQuery(string) (*mysql.Result, error) { return nil, errNotGoMySQL }
func (handshakeHandler) HandleFieldList(string, string) ([]*mysql.Field, error) {
	return nil, errNotGoMySQL
}
func (handshakeHandler) HandleStmtPrepare(string) (int, int, any, error) {
	return 0, 0, nil, errNotGoMySQL
}
func (handshakeHandler) HandleStmtExecute(any, string, []any) (*mysql.Result, error) {
	return nil, errNotGoMySQL
}
func (handshakeHandler) HandleStmtClose(any) error             { return errNotGoMySQL }
func (handshakeHandler) HandleOtherCommand(byte, []byte) error { return errNotGoMySQL }

// loginError is the client's answer when the session's primary connection
// failed at login: the server's refusal as the server sent it (code,
// SQLSTATE, message text: 1040 "Too many connections", as a client
// connected direct reads it) when the server refused, the proxy's own
// wording when the server's text is withheld (its account refused), else
// CR_CONN_HOST_ERROR (2003), as MySQL Router answers an unreachable
// server. The text never holds the backend account's credentials.
func loginError(err error) *mysql.MyError {
	var be *BackendError
	switch {
	case errors.As(err, &be) && be.Code != 0 && be.Text != "":
		return &mysql.MyError{Code: be.Code, State: be.State, Message: be.Text}
	case be != nil && be.Code != 0:
		return mysql.NewError(be.Code, "causallab proxy: "+be.Error())
	}
	return mysql.NewError(2003, "causallab proxy: cannot connect to the primary: "+err.Error())
}

// refuse answers the login with me. A refusal without SQLSTATE (1040
// sent before the greeting has none) is written here, without the
// SQLSTATE marker, as the server wrote it: go-mysql would write the
// marker and an empty state, and clients would read the message's first
// five bytes as the state. Its own error packet after it is dropped
// (handshakeConn.mute); the connection closes.
func (h *loginHandler) refuse(c *server.Conn, me *mysql.MyError) error {
	if me.State != "" || c.Capability()&mysql.CLIENT_PROTOCOL_41 == 0 || h.hc == nil {
		return me
	}
	pkt := make([]byte, 4, 4+3+len(me.Message))
	pkt = append(pkt, mysql.ERR_HEADER, byte(me.Code), byte(me.Code>>8))
	pkt = append(pkt, me.Message...)
	if err := c.WritePacket(pkt); err != nil {
		return err
	}
	h.hc.mute = true
	return me
}

// newUsers builds the configured accounts' credentials and a decoy for
// unknown users (a random password nobody knows).
func newUsers(cfg *Config) (map[string]server.Credential, server.Credential, error) {
	users := map[string]server.Credential{}
	for _, u := range cfg.Users {
		users[u.Name] = server.Credential{Passwords: []string{u.Password}, AuthPluginName: cfg.AuthMethod}
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, server.Credential{}, fmt.Errorf("proxy: decoy credential: %w", err)
	}
	return users, server.Credential{Passwords: []string{hex.EncodeToString(secret)}, AuthPluginName: cfg.AuthMethod}, nil
}

// authProvider is go-mysql's authentication with every failure answered
// as MySQL answers it, ER_ACCESS_DENIED_ERROR (1045): go-mysql sends
// other failures' Go text (a bad RSA-encrypted password came back as
// "crypto/rsa: decryption error").
//
// Under auth passthrough (passthrough) it runs passthroughAuth instead,
// with keys for the RSA exchange of a client without TLS.
type authProvider struct {
	*server.DefaultAuthenticationProvider
	passthrough bool
	keys        *clientKeys
}

var _ server.AuthenticationProvider = authProvider{}

// Authenticate runs go-mysql's authentication (or passthroughAuth) and
// maps its failures.
func (p authProvider) Authenticate(c *server.Conn, plugin string, data []byte) error {
	var err error
	if p.passthrough {
		err = p.passthroughAuth(c, plugin, data)
	} else {
		err = p.DefaultAuthenticationProvider.Authenticate(c, plugin, data)
	}
	var me *mysql.MyError
	if err == nil || errors.Is(err, server.ErrAccessDenied) || errors.As(err, &me) {
		return err
	}
	return fmt.Errorf("%w (%v)", server.ErrAccessDenied, err)
}

// preAuthMax bounds a client packet before login, outside TLS (a
// handshake response with connection attributes, an RSA-encrypted
// password): go-mysql's reader would allocate whatever length a header
// claims.
const preAuthMax = 64 << 10

// handshakeConn is a client connection until login. It checks the length
// of every plaintext packet the client sends before go-mysql reads it, and
// refuses one past preAuthMax (the connection then ends). It steps aside
// (passes bytes unchecked) once the client asked for TLS (a 32-byte
// SSLRequest: what follows is TLS records, whose packets it cannot see)
// and after login.
type handshakeConn struct {
	net.Conn
	// hdr is the rest of a checked header not yet read; remain the payload
	// bytes of the current packet not yet read.
	hdr    []byte
	hbuf   [4]byte
	remain int
	// packets counts the packets seen; through: pass bytes unchecked.
	packets int
	through bool
	// greeted: the greeting was written (Write); id is the session's id,
	// the greeting's thread id (greetingWithID).
	greeted bool
	id      uint32
	// sess is the session logging in; salt the scramble in effect, seen
	// in the greeting or an authentication switch written in plaintext
	// (passthroughAuth's RSA exchange needs it: go-mysql keeps its own
	// private).
	sess *session
	salt []byte
	// mute: writes are dropped (loginHandler.refuse wrote the login's
	// answer; the connection closes).
	mute bool
}

// errPreAuthPacket: a client packet before login was longer than
// preAuthMax.
var errPreAuthPacket = errors.New("proxy: client packet before login too long")

func (h *handshakeConn) Read(p []byte) (int, error) {
	if h.through {
		return h.Conn.Read(p)
	}
	if len(h.hdr) == 0 && h.remain == 0 {
		if _, err := io.ReadFull(h.Conn, h.hbuf[:]); err != nil {
			return 0, err
		}
		n := packetLen(h.hbuf[:])
		if n > preAuthMax {
			return 0, errPreAuthPacket
		}
		h.hdr, h.remain = h.hbuf[:], n
		h.packets++
	}
	if len(h.hdr) > 0 {
		n := copy(p, h.hdr)
		h.hdr = h.hdr[n:]
		h.stepAside()
		return n, nil
	}
	n, err := h.Conn.Read(p[:min(len(p), h.remain)])
	h.remain -= n
	h.stepAside()
	return n, err
}

// greetingFlags are capabilities MySQL offers that go-mysql v1.16.0's
// server cannot be told to offer (its SetCapability takes LOCAL_FILES and
// the multi-results flags only): the proxy passes the first two on to the
// backends (passedFlags), and speaks the compressed protocol (zlib) with
// the client itself (compressedConn), so it offers them. Clients keep only
// flags the server offered (go-sql-driver, libmysqlclient): without them
// multiStatements and clientFoundRows were silently off, and a client
// that requires compression was refused by its own library (2066).
const greetingFlags = mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_FOUND_ROWS | mysql.CLIENT_COMPRESS

// Write passes the server's writes on, adding greetingFlags to the
// greeting (the first packet, protocol version 10).
func (h *handshakeConn) Write(p []byte) (int, error) {
	if h.mute {
		return len(p), nil
	}
	if !h.through {
		if salt := scrambleOf(p, !h.greeted); salt != nil {
			h.salt = salt
		}
	}
	if h.greeted {
		return h.Conn.Write(p)
	}
	h.greeted = true
	return h.Conn.Write(greetingWithID(offerFlags(p, greetingFlags), h.id))
}

// offerFlags returns the greeting packet pkt (header included) with flags
// added to its capabilities (a copy), or pkt unchanged when it is not a
// protocol-10 greeting.
func offerFlags(pkt []byte, flags uint32) []byte {
	// header(4) protocol(1) version(NUL-terminated) connection id(4)
	// auth data(8) filler(1) capabilities low(2) charset(1) status(2)
	// capabilities high(2)
	if len(pkt) < 5 || pkt[3] != 0 || pkt[4] != 10 || packetLen(pkt) != len(pkt)-4 {
		return pkt
	}
	nul := bytes.IndexByte(pkt[5:], 0)
	if nul < 0 {
		return pkt
	}
	lo := 5 + nul + 1 + 4 + 8 + 1
	hi := lo + 2 + 1 + 2
	if len(pkt) < hi+2 {
		return pkt
	}
	out := bytes.Clone(pkt)
	binary.LittleEndian.PutUint16(out[lo:], binary.LittleEndian.Uint16(out[lo:])|uint16(flags))
	binary.LittleEndian.PutUint16(out[hi:], binary.LittleEndian.Uint16(out[hi:])|uint16(flags>>16))
	return out
}

// stepAside lets TLS through once the SSLRequest was read.
func (h *handshakeConn) stepAside() {
	if h.packets == 1 && h.remain == 0 && len(h.hdr) == 0 && packetLen(h.hbuf[:]) == 32 {
		h.through = true
	}
}
