package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
)

// Identity (docs/proxy-sessions.md, "Identity"). Under auth passthrough a client
// logs in with a MySQL account of the servers, as through MySQL Router:
// the proxy offers caching_sha2_password and always asks for its full
// authentication, which carries the password (in clear over TLS, else
// RSA-encrypted with the proxy's key), opens the session's primary
// connection as that account (the server's verdict is the login's), and
// every later backend connection of the session as that account too. The
// password stays in the session's memory (and, under multiplexing, in
// the pool key of the connections dialled with it); it is never logged.
// The servers' own accounts (Backend.User: the proxy's monitoring
// account, which polls positions and kills overrun waits) cannot be
// logged in as. Under auth mapped a client logs in as one of
// Config.Users and acts as that user's backend account.

// account is the MySQL account backend connections log in as. The zero
// account is each server's own (Backend.User, Backend.Password): the
// proxy's monitoring account, and mapped users without a backend account.
type account struct {
	user, password string
}

// on is the user name and password a to connect to b with.
func (a account) on(b *Backend) (user, password string) {
	if a.user == "" {
		return b.User, b.Password
	}
	return a.user, a.password
}

// mappedAccount is the backend account the mapped user name acts as.
func (s *Server) mappedAccount(name string) account {
	for _, u := range s.cfg.Users {
		if u.Name == name && u.BackendUser != "" {
			return account{user: u.BackendUser, password: u.BackendPassword}
		}
	}
	return account{}
}

// monitoring reports whether user is a server's own account (the proxy's
// monitoring account), which no client may act as under passthrough.
func (s *Server) monitoring(user string) bool {
	if user == s.cfg.Primary.User {
		return true
	}
	for _, b := range s.cfg.Replicas {
		if user == b.User {
			return true
		}
	}
	return false
}

// accessDenied is MySQL's answer to a login it refuses (the same text
// for an unknown user, a wrong password and the monitoring account, as
// go-mysql's own refusal: no user enumeration).
func accessDenied(user, remote string, password bool) *mysql.MyError {
	using := mysql.MySQLErrName[mysql.ER_NO]
	if password {
		using = mysql.MySQLErrName[mysql.ER_YES]
	}
	return mysql.NewDefaultError(mysql.ER_ACCESS_DENIED_ERROR, user, remote, using)
}

// isEmptyAuth: the client's auth response for an empty password (no data,
// or one NUL byte, as MySQL reads it).
func isEmptyAuth(data []byte) bool {
	return len(data) == 0 || (len(data) == 1 && data[0] == 0)
}

// packetRW is a client connection during authentication: packets written
// with 4 bytes of header room, read without a header.
type packetRW interface {
	WritePacket(data []byte) error
	ReadPacket() ([]byte, error)
}

// clientKeys is the proxy's RSA key for caching_sha2_password's key
// exchange without TLS, with its public half as the PEM the client asks
// for.
type clientKeys struct {
	key *rsa.PrivateKey
	pub []byte
}

func newClientKeys(key *rsa.PrivateKey) (*clientKeys, error) {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("proxy: RSA public key: %w", err)
	}
	return &clientKeys{key: key, pub: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}, nil
}

// fullAuth runs caching_sha2_password's full authentication after the
// client's scramble (scramble; the proxy cannot check it: it never has
// the account's hash) and returns the password: it asks for the password
// (AuthMoreData 0x04), which comes in clear over TLS (tlsOn), else,
// after the client asked for the public key (0x02) or not, encrypted with
// keys (RSA-OAEP over the password XOR salt, the scramble in effect). An
// empty scramble is an empty password, as MySQL reads it.
func fullAuth(rw packetRW, scramble []byte, tlsOn bool, salt []byte, keys *clientKeys) (string, error) {
	if isEmptyAuth(scramble) {
		return "", nil
	}
	if err := rw.WritePacket([]byte{0, 0, 0, 0, mysql.MORE_DATE_HEADER, mysql.CACHE_SHA2_FULL_AUTH}); err != nil {
		return "", err
	}
	data, err := rw.ReadPacket()
	if err != nil {
		return "", err
	}
	if !tlsOn {
		if data, err = decryptPassword(rw, data, salt, keys); err != nil {
			return "", err
		}
	}
	return string(bytes.TrimSuffix(data, []byte{0})), nil
}

// errNoSalt: the scramble of a non-TLS login was not seen (it cannot
// happen with go-mysql's greeting; the login is refused).
var errNoSalt = errors.New("proxy: the login's scramble is unknown")

// decryptPassword is fullAuth's RSA exchange without TLS: data is the
// client's answer to the request for the password.
func decryptPassword(rw packetRW, data, salt []byte, keys *clientKeys) ([]byte, error) {
	if keys == nil || len(salt) == 0 {
		return nil, errNoSalt
	}
	if len(data) == 1 && data[0] == 0x02 {
		// The client asks for the public key.
		if err := rw.WritePacket(append([]byte{0, 0, 0, 0, mysql.MORE_DATE_HEADER}, keys.pub...)); err != nil {
			return nil, err
		}
		var err error
		if data, err = rw.ReadPacket(); err != nil {
			return nil, err
		}
	}
	plain, err := rsa.DecryptOAEP(sha1.New(), rand.Reader, keys.key, data, nil)
	if err != nil {
		return nil, err
	}
	return mysql.Xor(plain, salt), nil
}

// passthroughAuth is the login's authentication under auth passthrough
// (authProvider): the password, from caching_sha2_password's full
// authentication, becomes the session's account; the primary verifies it
// when the session connects (loginHandler.OnAuthSuccess). The monitoring
// account is refused after the same exchange.
func (p authProvider) passthroughAuth(c *server.Conn, plugin string, data []byte) error {
	hc := handshakeOf(c.Conn.Conn)
	if hc == nil || hc.sess == nil {
		return errors.New("proxy: no login state")
	}
	if plugin != mysql.AUTH_CACHING_SHA2_PASSWORD {
		return server.ErrAccessDenied
	}
	_, tlsOn := c.Conn.Conn.(*tls.Conn)
	pw, err := fullAuth(c, data, tlsOn, hc.salt, p.keys)
	if err != nil {
		return err
	}
	if hc.sess.srv.monitoring(c.GetUser()) {
		return server.ErrAccessDenied
	}
	hc.sess.acct = account{user: c.GetUser(), password: pw}
	hc.sess.fresh = true
	return nil
}

// handshakeOf finds the handshakeConn under a login's connection (TLS
// over it, or itself).
func handshakeOf(c net.Conn) *handshakeConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	hc, _ := c.(*handshakeConn)
	return hc
}

// scrambleOf returns the scramble a server packet written to the client
// before login carries (pkt with its header): the greeting's (protocol
// 10: part 1 after the connection id, part 2 after the reserved bytes)
// or an authentication switch's (0xFE, the plugin name, the scramble);
// nil for any other packet.
func scrambleOf(pkt []byte, greeting bool) []byte {
	if len(pkt) < 5 || packetLen(pkt) != len(pkt)-4 {
		return nil
	}
	if !greeting {
		if pkt[4] != mysql.EOF_HEADER {
			return nil
		}
		nul := bytes.IndexByte(pkt[5:], 0)
		if nul < 0 {
			return nil
		}
		s := pkt[5+nul+1:]
		if len(s) < 20 {
			return nil
		}
		return bytes.Clone(s[:20])
	}
	if pkt[4] != 10 {
		return nil
	}
	nul := bytes.IndexByte(pkt[5:], 0)
	if nul < 0 {
		return nil
	}
	p1 := 5 + nul + 1 + 4
	p2 := p1 + 8 + 1 + 2 + 1 + 2 + 2 + 1 + 10
	if len(pkt) < p2+12 {
		return nil
	}
	return append(bytes.Clone(pkt[p1:p1+8]), pkt[p2:p2+12]...)
}
