// Package connpass hands accepted TCP connections from one process to
// another over a Unix socket (SCM_RIGHTS), for `causallab proxy
// --workers`: the supervising process accepts clients and deals them out
// to its worker processes, each of which serves the connections it is
// given as if it had accepted them itself.
//
// Why whole processes: a Go process has one network poller waiter, so a
// proxy serving a few busy connections on a small machine leaves a CPU
// idle while a ready connection waits for the one thread that polls
// (docs/benchmarks-proxy.md, "Worker processes"). Worker processes each
// poll on their own, as MySQL Router's I/O threads and ProxySQL's
// MySQL threads do.
//
// A message is one byte ('c') carrying one descriptor. Anything else (no
// descriptor, several, a message of another length) is an error naming
// what arrived, and every descriptor it carried is closed.
package connpass

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// msgConn is the one payload byte of a hand-off message.
const msgConn = 'c'

// Send hands c's descriptor to the process at the other end of u and
// closes c in this process (the receiver owns the connection from then
// on, whatever Send returns).
func Send(u *net.UnixConn, c *net.TCPConn) error {
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("connpass: send: %w", err)
	}
	var sendErr error
	if err := rc.Control(func(fd uintptr) {
		_, _, sendErr = u.WriteMsgUnix([]byte{msgConn}, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return fmt.Errorf("connpass: send: %w", err)
	}
	if sendErr != nil {
		return fmt.Errorf("connpass: send: %w", sendErr)
	}
	return nil
}

// Listener is a net.Listener whose Accept returns the connections handed
// over its Unix socket by Send. Close closes the socket.
type Listener struct {
	u    *net.UnixConn
	addr net.Addr
	mu   sync.Mutex // one Accept reads the socket at a time
	buf  [1]byte
	oob  []byte
}

var _ net.Listener = (*Listener)(nil)

// NewListener returns a Listener reading hand-offs from u; addr is the
// address it reports (the supervisor's listen address).
func NewListener(u *net.UnixConn, addr net.Addr) *Listener {
	// Room for one descriptor, and for a few more so that a message
	// carrying several is read whole (and refused) rather than truncated.
	return &Listener{u: u, addr: addr, oob: make([]byte, syscall.CmsgSpace(4*8))}
}

// ErrBadMessage is wrapped by Accept's error for a message that is not a
// hand-off (Accept's caller should stop: the socket is out of step).
var ErrBadMessage = errors.New("connpass: not a connection hand-off")

// Accept waits for the next handed-over connection. It returns
// net.ErrClosed (wrapped) once the socket is closed or the sender has
// gone.
func (l *Listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, oobn, flags, _, err := l.u.ReadMsgUnix(l.buf[:], l.oob)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, fmt.Errorf("connpass: accept: %w", net.ErrClosed)
		}
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("connpass: accept: sender gone: %w", net.ErrClosed)
		}
		return nil, fmt.Errorf("connpass: accept: %w", err)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := syscall.ParseSocketControlMessage(l.oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("%w: control message: %v", ErrBadMessage, err)
		}
		for _, m := range msgs {
			if got, err := syscall.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	switch {
	case n == 0 && oobn == 0:
		// The sender closed its end.
		return nil, fmt.Errorf("connpass: accept: sender gone: %w", net.ErrClosed)
	case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
		closeAll()
		return nil, fmt.Errorf("%w: truncated message (flags %#x)", ErrBadMessage, flags)
	case n != 1 || l.buf[0] != msgConn:
		closeAll()
		return nil, fmt.Errorf("%w: payload %q", ErrBadMessage, l.buf[:n])
	case len(fds) != 1:
		closeAll()
		return nil, fmt.Errorf("%w: %d descriptors, want 1", ErrBadMessage, len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "handed-off connection")
	c, err := net.FileConn(f) // dups the descriptor (non-blocking, on the poller)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%w: descriptor: %v", ErrBadMessage, err)
	}
	if _, ok := c.(*net.TCPConn); !ok {
		c.Close()
		return nil, fmt.Errorf("%w: descriptor is a %T, not a TCP connection", ErrBadMessage, c)
	}
	return c, nil
}

// Close closes the Unix socket: a blocked Accept returns.
func (l *Listener) Close() error { return l.u.Close() }

// Addr is the address given to NewListener.
func (l *Listener) Addr() net.Addr { return l.addr }

// Pair returns a connected pair of Unix sockets (SOCK_SEQPACKET: one
// hand-off a message): the supervisor keeps the first, the worker gets
// the second as a file (its descriptor passed to the worker process).
func Pair() (*net.UnixConn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("connpass: socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "connpass supervisor end")
	theirs := os.NewFile(uintptr(fds[1]), "connpass worker end")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, nil, fmt.Errorf("connpass: socketpair: %w", err)
	}
	return c.(*net.UnixConn), theirs, nil
}

// FileListener returns the Listener over the worker's end of a Pair,
// passed to the worker process as f.
func FileListener(f *os.File, addr net.Addr) (*Listener, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("connpass: worker socket: %w", err)
	}
	u, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("connpass: worker socket is a %T, not a Unix socket", c)
	}
	return NewListener(u, addr), nil
}
