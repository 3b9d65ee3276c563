package proxy

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Fairness (issue 38): no client or account can take what the others
// need. Admission lives here: connections still in their login
// (max_handshakes) and logged-in ones (max_connections) are bounded
// apart, so that neither starves the other, and logged-in ones per
// account (max_user_connections). The other bounds live where what they
// bound is taken (stmtdata.go, session_stmt.go, clientconn.go,
// pool_session.go).

// handshakeStalled is how long a login must have been in progress to be
// closed for a new connection when max_handshakes logins are: a login
// takes a few round trips (milliseconds), a client stalling its login (a
// slow-loris client trickling bytes) takes until handshake_timeout.
const handshakeStalled = time.Second

// connSlot is an accepted client connection's place in the Server's
// bounds (under Server.mu): one of the handshakes until its
// authentication passes (graduate), then one of the sessions, counted in
// its account.
type connSlot struct {
	c     net.Conn
	start time.Time
	// hs is its element in Server.handshakes (nil once out of it:
	// graduated or evicted); session: counted in Server.sessions; user:
	// the account it is counted in ("" before).
	hs      *list.Element
	session bool
	user    string
	// evicted: closed for a newer connection (read by the session's
	// goroutine after its login failed).
	evicted atomic.Bool
}

// Why a connection is refused before its greeting (refuseConn).
const (
	refusedMaxConnections = "refused-max-connections"
	refusedMaxHandshakes  = "refused-max-handshakes"
)

// admit takes an accepted connection into the handshakes, or says why it
// is refused: max_connections sessions are logged in (nobody could log
// in), or max_handshakes logins are in progress and the oldest has not
// stalled (handshakeStalled). When it has, it is closed to make room
// (connections_total{outcome="handshake-evicted"}): a client that stalls
// its login cannot keep others from logging in.
func (s *Server) admit(c net.Conn, now time.Time) (*connSlot, string) {
	s.mu.Lock()
	if s.sessions >= s.cfg.MaxConnections {
		s.mu.Unlock()
		return nil, refusedMaxConnections
	}
	var evict *connSlot
	if s.handshakes.Len() >= s.cfg.MaxHandshakes {
		oldest := s.handshakes.Front().Value.(*connSlot)
		if now.Sub(oldest.start) < handshakeStalled {
			s.mu.Unlock()
			return nil, refusedMaxHandshakes
		}
		s.handshakes.Remove(oldest.hs)
		oldest.hs = nil
		oldest.evicted.Store(true)
		evict = oldest
	}
	slot := &connSlot{c: c, start: now}
	slot.hs = s.handshakes.PushBack(slot)
	s.conns[c] = nil
	s.m.handshakes.Set(float64(s.handshakes.Len()))
	s.mu.Unlock()
	if evict != nil {
		s.m.connections.WithLabelValues("handshake-evicted").Inc()
		_ = evict.c.Close()
	}
	return slot, ""
}

// errEvicted: a login closed for a newer connection (admit).
var errEvicted = errors.New("proxy: login closed for a newer connection (max_handshakes)")

// graduate makes slot's connection, whose client authenticated as user,
// one of the sessions, counted in its account; or refuses it as MySQL
// would: ER_CON_COUNT_ERROR past max_connections, ER_TOO_MANY_USER_CONNECTIONS
// past max_user_connections (counted).
func (s *Server) graduate(slot *connSlot, user string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot.hs == nil {
		return errEvicted
	}
	s.handshakes.Remove(slot.hs)
	slot.hs = nil
	s.m.handshakes.Set(float64(s.handshakes.Len()))
	if s.sessions >= s.cfg.MaxConnections {
		s.m.connections.WithLabelValues(refusedMaxConnections).Inc()
		return mysql.NewError(mysql.ER_CON_COUNT_ERROR, s.tooManyConnections(refusedMaxConnections))
	}
	if s.accounts[user] >= s.cfg.MaxUserConnections {
		return s.tooManyUserConnections(user)
	}
	s.accounts[user]++
	s.sessions++
	slot.session, slot.user = true, user
	return nil
}

// leave gives back what slot holds: its place in the handshakes, or in
// the sessions and its account.
func (s *Server) leave(slot *connSlot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot.hs != nil {
		s.handshakes.Remove(slot.hs)
		slot.hs = nil
		s.m.handshakes.Set(float64(s.handshakes.Len()))
	}
	if slot.session {
		s.sessions--
		slot.session = false
	}
	if slot.user != "" {
		if s.accounts[slot.user]--; s.accounts[slot.user] <= 0 {
			delete(s.accounts, slot.user)
		}
		slot.user = ""
	}
}

// tooManyConnections is the text of a 1040 refusal for why.
func (s *Server) tooManyConnections(why string) string {
	if why == refusedMaxHandshakes {
		return fmt.Sprintf("causallab proxy: Too many connections (max_handshakes %d logins in progress)", s.cfg.MaxHandshakes)
	}
	return fmt.Sprintf("causallab proxy: Too many connections (max_connections %d)", s.cfg.MaxConnections)
}

// moveAccount moves slot's logged-in connection to account to
// (COM_CHANGE_USER), refusing it as graduate does when to is at its
// bound (the old account keeps it then). A nil slot (a session not
// admitted by Serve, as the command tests' harness) counts nothing.
func (s *Server) moveAccount(slot *connSlot, to string) error {
	if slot == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	from := slot.user
	if from == to {
		return nil
	}
	if s.accounts[to] >= s.cfg.MaxUserConnections {
		return s.tooManyUserConnections(to)
	}
	s.accounts[to]++
	if s.accounts[from]--; s.accounts[from] <= 0 {
		delete(s.accounts, from)
	}
	slot.user = to
	return nil
}

// tooManyUserConnections is MySQL's answer to a login past
// max_user_connections, counted.
func (s *Server) tooManyUserConnections(user string) error {
	s.m.connections.WithLabelValues("refused-max-user-connections").Inc()
	return mysql.NewError(mysql.ER_TOO_MANY_USER_CONNECTIONS, fmt.Sprintf(
		"User %s already has more than 'max_user_connections' active connections (causallab proxy: max_user_connections %d)",
		truncateName(user), s.cfg.MaxUserConnections))
}

// truncateName is a client-sent name cut as MySQL's messages cut it
// (%-.64s).
func truncateName(name string) string {
	if len(name) > 64 {
		return name[:64]
	}
	return name
}
