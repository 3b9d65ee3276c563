package proxy

import (
	"net"
	"syscall"
	"time"
)

// idleCheckAfter is how long a backend connection must have been unused
// before a command is sent on it for the proxy to check, first, whether
// the server closed it meanwhile (wait_timeout): one non-blocking peek,
// skipped for connections in steady use.
const idleCheckAfter = time.Second

// closedWhileIdle reports whether the server closed bc, or wrote to it
// unasked (MySQL 8.0.24+ sends ER_CLIENT_INTERACTION_TIMEOUT before it
// closes an idle connection), since the proxy last used it. Only a
// connection idle for idleCheckAfter is checked.
func (bc *backendConn) closedWhileIdle(now time.Time) bool {
	if bc == nil || bc.broken || now.Sub(bc.used) < idleCheckAfter {
		return false
	}
	if bc.frames != nil && bc.frames.Buffered() > 0 {
		return true // bytes nobody asked for, already read off the socket
	}
	c := bc.conn.Conn.Conn
	if bc.dc != nil {
		c = bc.dc.Conn // the socket below the deadlines (a DeadlineConn has no SyscallConn)
	}
	return peerClosed(c)
}

// peerClosed peeks at c without blocking or consuming: true when the
// peer closed it, reset it, or sent bytes nobody asked for.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Read(func(fd uintptr) bool {
		// Nothing pending (EAGAIN): open. Otherwise EOF, bytes nobody
		// asked for, or the connection's error.
		_, err := peekFD(fd)
		closed = err != syscall.EAGAIN
		return true
	})
	return closed
}

// peekFD peeks at one byte of fd without waiting or consuming: n 0 and no
// error is the end of the stream; EAGAIN, nothing pending.
func peekFD(fd uintptr) (n int, err error) {
	var b [1]byte
	for {
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != syscall.EINTR {
			return n, err
		}
	}
}
