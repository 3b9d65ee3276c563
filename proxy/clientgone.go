package proxy

import (
	"context"
	"syscall"
	"time"
)

// clientSweep is how often watchClients looks at the clients of the
// sessions with a command in flight, and how long a command has run
// before its client is looked at.
const clientSweep = 250 * time.Millisecond

// watchClients ends the sessions whose client hung up while a command of
// theirs runs (a statement waiting for a lock, a long query), until ctx
// ends. MySQL aborts the statement of a client that went away; without
// this the proxy would let it run to its end on the server, holding its
// locks, with nobody to answer. A session found so is ended as KILL
// CONNECTION ends one (runState.end: its context ends, which cuts its
// backend connections, and the server aborts the statement), counted in
// client_errors_total{kind="client-gone-mid-statement"}. One
// non-blocking peek at each such client's socket (hungUp): bytes a client
// sent ahead stay for the session.
func (s *Server) watchClients(ctx context.Context) {
	tick := time.NewTicker(clientSweep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, sess := range s.busySessions(time.Now().Add(-clientSweep)) {
			if sess.sock != nil && hungUp(sess.sock) {
				sess.countClientError("client-gone-mid-statement")
				s.log.Debug("client hung up mid-statement: session ended", "session", sess.id)
				sess.run.endSession()
			}
		}
	}
}

// busySessions are the sessions whose current command began before
// since.
func (s *Server) busySessions(since time.Time) []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*session
	for _, sess := range s.byID {
		if sess.run.busySince(since) {
			out = append(out, sess)
		}
	}
	return out
}

// busySince: a command is in flight and began before since.
func (r *runState) busySince(since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != 0 && r.since.Before(since)
}

// endSession ends the session as KILL CONNECTION does (end: nil before
// the session is set up).
func (r *runState) endSession() {
	r.mu.Lock()
	end := r.end
	r.mu.Unlock()
	if end != nil {
		end()
	}
}

// hungUp peeks at the client's socket without blocking or consuming:
// true when the client closed it (end of stream) or it failed; bytes the
// client sent ahead are not a hang-up.
func hungUp(sock syscall.RawConn) bool {
	gone := false
	// Control, not Read: it neither waits for the session's own read of
	// the socket (LOAD DATA LOCAL's file) nor parks on the netpoller.
	_ = sock.Control(func(fd uintptr) {
		n, err := peekFD(fd)
		switch {
		case err == syscall.EAGAIN:
			gone = false // nothing pending: open
		case err != nil:
			gone = true // reset, or another error
		default:
			gone = n == 0 // end of stream; more: bytes sent ahead
		}
	})
	return gone
}
