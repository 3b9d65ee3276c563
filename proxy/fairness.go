package proxy

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Fairness (issue 38): no client or account can take what the others
// need. The per-account bound on logged-in connections
// (max_user_connections) lives here; the others where what they bound is
// taken (stmtdata.go, session_stmt.go, clientconn.go, pool_session.go).

// takeAccount counts a logged-in connection of user, or refuses it with
// MySQL's ER_TOO_MANY_USER_CONNECTIONS when user has max_user_connections
// already. Each success is given back with releaseAccount.
func (s *Server) takeAccount(user string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.accounts[user] >= s.cfg.MaxUserConnections {
		return s.tooManyUserConnections(user)
	}
	s.accounts[user]++
	return nil
}

// releaseAccount gives back a connection takeAccount counted.
func (s *Server) releaseAccount(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.accounts[user]--; s.accounts[user] <= 0 {
		delete(s.accounts, user)
	}
}

// moveAccount moves a logged-in connection from account from to account
// to (COM_CHANGE_USER), refusing it as takeAccount does when to is at its
// bound (from keeps it then).
func (s *Server) moveAccount(from, to string) error {
	if from == to {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.accounts[to] >= s.cfg.MaxUserConnections {
		return s.tooManyUserConnections(to)
	}
	s.accounts[to]++
	if s.accounts[from]--; s.accounts[from] <= 0 {
		delete(s.accounts, from)
	}
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
