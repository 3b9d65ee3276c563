package proxy

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/charset"
)

// changeUserReq is a parsed COM_CHANGE_USER payload.
type changeUserReq struct {
	user string
	// auth is the client's auth response for the login's scramble (not
	// used: the proxy always asks again with a fresh one, see changeUser).
	auth []byte
	db   string
	// collation is the collation id the client asked for (0: none sent).
	collation uint16
	// plugin is the client's authentication plugin ("" when none sent).
	plugin string
}

// errMalformedChangeUser: a COM_CHANGE_USER payload that does not parse.
var errMalformedChangeUser = errors.New("malformed COM_CHANGE_USER")

// parseChangeUser parses COM_CHANGE_USER's payload after the command
// byte, for a client with capabilities caps: user NUL, the auth response
// (one length byte with CLIENT_SECURE_CONNECTION, else NUL-terminated),
// the database NUL, then optionally the collation (2 bytes), the plugin
// name NUL (CLIENT_PLUGIN_AUTH) and connection attributes (ignored). The
// strings are copies.
func parseChangeUser(data []byte, caps uint32) (changeUserReq, error) {
	var r changeUserReq
	cstr := func() (string, bool) {
		i := bytes.IndexByte(data, 0)
		if i < 0 {
			return "", false
		}
		s := string(data[:i])
		data = data[i+1:]
		return s, true
	}
	var ok bool
	if r.user, ok = cstr(); !ok {
		return r, errMalformedChangeUser
	}
	if caps&mysql.CLIENT_SECURE_CONNECTION != 0 {
		if len(data) < 1 || len(data) < 1+int(data[0]) {
			return r, errMalformedChangeUser
		}
		n := int(data[0])
		r.auth = bytes.Clone(data[1 : 1+n])
		data = data[1+n:]
	} else {
		a, ok := cstr()
		if !ok {
			return r, errMalformedChangeUser
		}
		r.auth = []byte(a)
	}
	if len(data) == 0 {
		return r, nil // an old client: no database
	}
	if r.db, ok = cstr(); !ok {
		// The database as the last field, without its NUL.
		r.db, data = string(data), nil
	}
	if len(data) >= 2 {
		r.collation = binary.LittleEndian.Uint16(data)
		data = data[2:]
	}
	if caps&mysql.CLIENT_PLUGIN_AUTH != 0 && len(data) > 0 {
		if r.plugin, ok = cstr(); !ok {
			r.plugin = string(data)
		}
	}
	return r, nil
}

// changeUser handles COM_CHANGE_USER as MySQL does: the new user is
// authenticated, then the session starts over as a new connection of
// that user would (sessionState.reset: variables, holds, transaction,
// prepared statements, token and watermark gone; resetSession), in the
// database and collation the command names. The proxy does not keep the
// login's scramble (go-mysql's server holds it privately), so it always
// answers with an authentication switch to a fresh scramble: to
// mysql_native_password when the client named it, else
// caching_sha2_password (verified against the configured password, then
// fast-auth success), as MySQL answers a client whose plugin or
// scramble does not fit. A failed authentication is MySQL's 1045 and
// the connection closes (the old user's session does not continue).
func (s *session) changeUser(data []byte) error {
	req, err := parseChangeUser(data, s.caps)
	if err != nil {
		return mysql.NewError(mysql.ER_MALFORMED_PACKET, "Malformed communication packet.")
	}
	if s.srv.cfg.Auth == AuthPassthrough {
		return s.changeUserPassthrough(req)
	}
	plugin := mysql.AUTH_CACHING_SHA2_PASSWORD
	if req.plugin == mysql.AUTH_NATIVE_PASSWORD {
		plugin = mysql.AUTH_NATIVE_PASSWORD
	}
	salt := mysql.RandomBuf(20)
	sw := append([]byte{0, 0, 0, 0, mysql.EOF_HEADER}, plugin...)
	sw = append(append(append(sw, 0), salt...), 0)
	if err := s.cc.writePacket(sw); err != nil {
		return err
	}
	resp, err := s.cc.readPacket()
	if err != nil {
		return err // the client is gone: the connection closes
	}
	cred, known := s.srv.users[req.user]
	if !known || !checkScramble(plugin, salt, cred.Passwords, resp) {
		return s.changeUserDenied(req.user)
	}
	if err := s.srv.moveAccount(s.slot, req.user); err != nil {
		// MySQL refuses it as a login past max_user_connections.
		s.closeAfter = true
		return err
	}
	// An empty password's answer is the OK alone, as MySQL's
	// caching_sha2_password answers it (libmysqlclient's plugin reads no
	// fast-auth packet then).
	if plugin == mysql.AUTH_CACHING_SHA2_PASSWORD && !isEmptyAuth(resp) {
		if err := s.cc.writePacket([]byte{0, 0, 0, 0, mysql.MORE_DATE_HEADER, mysql.CACHE_SHA2_FAST_AUTH}); err != nil {
			return err
		}
	}
	s.acct = s.srv.mappedAccount(req.user)
	return s.startOver(req)
}

// startOver is the end of COM_CHANGE_USER once the new user is
// authenticated: the session starts over in the database and collation
// the command names.
func (s *session) startOver(req changeUserReq) error {
	s.state.db = req.db
	if req.collation != 0 {
		if col, err := charset.GetCollationByID(int(req.collation)); err == nil {
			s.state.collation = col.Name
		}
	}
	s.srv.m.statements.WithLabelValues("change-user", "proxy").Inc()
	if err := s.resetSession(); err != nil {
		// No primary connection for the new session (a database the
		// primary does not have, the account refused): the client
		// reconnects.
		s.closeAfter = true
		if s.srv.cfg.Auth == AuthPassthrough && backendDenied(err) {
			return s.changeUserDenied(req.user)
		}
		return err
	}
	return nil
}

// changeUserDenied is a COM_CHANGE_USER's refusal, MySQL's 1045 (the
// connection closes after it).
func (s *session) changeUserDenied(user string) error {
	s.srv.m.clientErrors.WithLabelValues("change-user-denied").Inc()
	s.closeAfter = true
	return mysql.NewError(mysql.ER_ACCESS_DENIED_ERROR,
		"Access denied for user '"+strings.ReplaceAll(user, "'", "''")+"' (causallab proxy: COM_CHANGE_USER)")
}

// changeUserPassthrough is changeUser under auth passthrough: an
// authentication switch to caching_sha2_password with a fresh scramble,
// its full authentication (the password in clear over TLS, else
// RSA-encrypted: fullAuth), then the session starts over as the new
// account, its new primary connection verifying the password on the
// server (a refusal: 1045, the connection closes). The monitoring
// account is refused after the same exchange.
func (s *session) changeUserPassthrough(req changeUserReq) error {
	salt := mysql.RandomBuf(20)
	sw := append([]byte{0, 0, 0, 0, mysql.EOF_HEADER}, mysql.AUTH_CACHING_SHA2_PASSWORD...)
	sw = append(append(append(sw, 0), salt...), 0)
	if err := s.cc.writePacket(sw); err != nil {
		return err
	}
	resp, err := s.cc.readPacket()
	if err != nil {
		return err // the client is gone: the connection closes
	}
	pw, err := fullAuth(ccAuth{s.cc}, bytes.Clone(resp), s.tls != nil, salt, s.srv.keys)
	if err != nil || s.srv.monitoring(req.user) {
		return s.changeUserDenied(req.user)
	}
	if err := s.srv.moveAccount(s.slot, req.user); err != nil {
		s.closeAfter = true
		return err
	}
	s.acct = account{user: req.user, password: pw}
	s.fresh = true
	return s.startOver(req)
}

// ccAuth is a client connection as fullAuth's packetRW.
type ccAuth struct{ cc *clientConn }

func (a ccAuth) WritePacket(data []byte) error { return a.cc.writePacket(data) }
func (a ccAuth) ReadPacket() ([]byte, error) {
	pkt, err := a.cc.readPacket()
	return bytes.Clone(pkt), err
}

// checkScramble reports whether resp is the plugin's scramble of salt
// with one of passwords. An empty password's response is empty or one NUL
// byte (isEmptyAuth: libmysqlclient's caching_sha2_password sends the
// byte), as MySQL reads it.
func checkScramble(plugin string, salt []byte, passwords []string, resp []byte) bool {
	for _, pw := range passwords {
		var want []byte
		switch {
		case pw == "":
			if isEmptyAuth(resp) {
				return true
			}
			continue
		case plugin == mysql.AUTH_NATIVE_PASSWORD:
			want = mysql.CalcNativePassword(salt, []byte(pw))
		default:
			want = mysql.CalcCachingSha2Password(salt, []byte(pw))
		}
		if len(want) == len(resp) && subtle.ConstantTimeCompare(want, resp) == 1 {
			return true
		}
	}
	return false
}
