package rawnet

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Wrap returns c with raw-system-call Read and Write when c is a
// *net.TCPConn, and c itself otherwise (or when its descriptor cannot be
// reached).
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &conn{Conn: c, rc: rc}
	w.r.fn = w.r.read
	w.w.fn = w.w.write
	return w
}

// conn is a TCP connection whose Read and Write are raw system calls. The
// embedded net.Conn serves everything else (deadlines, addresses, Close).
type conn struct {
	net.Conn
	rc syscall.RawConn
	r  op // Read's state, guarded by r.mu
	w  op // Write's state, guarded by w.mu
}

var _ net.Conn = (*conn)(nil)

// SyscallConn is the connection's descriptor, as *net.TCPConn's (a
// caller's own non-blocking checks, such as a peek for a peer that closed
// an idle connection).
func (c *conn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// op is one direction's call state. fn is bound once (a method value) so
// that a call allocates nothing; mu makes concurrent Reads (or Writes)
// take turns, as net.Conn's own do.
type op struct {
	mu    sync.Mutex
	fn    func(fd uintptr) bool
	buf   []byte
	n     int
	errno syscall.Errno
}

// read is the RawConn.Read callback: false asks the netpoller to wait for
// readability.
func (o *op) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&o.buf[0])), uintptr(len(o.buf)))
		switch e {
		case 0:
			o.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
}

// write is the RawConn.Write callback: it writes all of buf, asking the
// netpoller to wait for writability whenever the socket buffer is full.
func (o *op) write(fd uintptr) bool {
	for o.n < len(o.buf) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&o.buf[o.n])), uintptr(len(o.buf)-o.n))
		switch e {
		case 0:
			o.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}

// run performs one Read (write false) or Write: o's callback under the
// socket's read or write side, o's mutex held. It returns the bytes done,
// the system call's errno and RawConn's own error (closed, deadline).
func (o *op) run(rc syscall.RawConn, write bool, b []byte) (int, syscall.Errno, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf, o.n, o.errno = b, 0, 0
	var err error
	if write {
		err = rc.Write(o.fn)
	} else {
		err = rc.Read(o.fn)
	}
	n, errno := o.n, o.errno
	o.buf = nil
	return n, errno, err
}

func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, errno, err := c.r.run(c.rc, false, b)
	switch {
	case err != nil: // closed, or the deadline passed
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *conn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, errno, err := c.w.run(c.rc, true, b)
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
}

// opError builds the error net.Conn itself would return for errno.
func (c *conn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}
