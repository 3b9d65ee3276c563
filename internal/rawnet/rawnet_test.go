package rawnet

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// pair returns both ends of a loopback TCP connection, each wrapped.
func pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	client, server = Wrap(c), Wrap(s)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func isRaw(c net.Conn) bool { _, ok := c.(*conn); return ok }

func TestWrap(t *testing.T) {
	c, s := pair(t)
	if runtime.GOOS == "linux" && (!isRaw(c) || !isRaw(s)) {
		t.Fatalf("TCP connections not wrapped: %T %T", c, s)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if w := Wrap(a); w != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want the connection itself", w)
	}
}

// TestEchoLarge sends 8 MiB in random-sized writes while the other end
// echoes it back, both directions at once, and checks every byte.
func TestEchoLarge(t *testing.T) {
	c, s := pair(t)
	want := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	go func() { _, _ = io.Copy(s, s) }() // echo (uses Read and Write)
	errc := make(chan error, 1)
	go func() {
		rest := want
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(256<<10))
			if k, err := c.Write(rest[:n]); err != nil || k != n {
				errc <- errors.Join(err, errors.New("short write"))
				return
			}
			rest = rest[n:]
		}
		errc <- nil
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("echoed bytes differ")
	}
}

// TestWriteWaitsForRoom: one Write far larger than both socket buffers
// parks until the reader drains them and returns the whole length.
func TestWriteWaitsForRoom(t *testing.T) {
	c, s := pair(t)
	// Larger than loopback's largest send plus receive buffers.
	buf := bytes.Repeat([]byte("causallab"), 32<<20/9)
	done := make(chan struct{})
	var n int
	var werr error
	go func() { n, werr = c.Write(buf); close(done) }()
	select {
	case <-done:
		t.Fatalf("a %d-byte write returned before anything was read (n=%d, err=%v)", len(buf), n, werr)
	case <-time.After(50 * time.Millisecond):
	}
	got := make([]byte, len(buf))
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	<-done
	if werr != nil || n != len(buf) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, werr, len(buf))
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("bytes differ")
	}
}

func TestReadDeadline(t *testing.T) {
	c, _ := pair(t)
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := c.Read(make([]byte, 10))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %d, %v; want a deadline error", n, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v is not a net.Error with Timeout()", err)
	}
	if d := time.Since(start); d < 15*time.Millisecond {
		t.Fatalf("returned after %v, before the deadline", d)
	}
	// A deadline in the past fails at once; clearing it lets data through.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
}

// TestWriteDeadline: a write that outlives its deadline fails with the
// deadline error and reports the part the socket buffers took. A
// goroutine that first runs after its deadline has passed writes nothing
// (the runtime checks the deadline before the first system call, as for
// any net.Conn): on a loaded machine 50 ms can pass between
// SetWriteDeadline and Write, so such an attempt is tried again with a
// deadline ten times longer (up to 5 s); a Write that never reports its
// bytes fails every attempt.
func TestWriteDeadline(t *testing.T) {
	buf := make([]byte, 64<<20)
	for d := 50 * time.Millisecond; ; d *= 10 {
		c, _ := pair(t) // nobody reads the other end
		if err := c.SetWriteDeadline(time.Now().Add(d)); err != nil {
			t.Fatal(err)
		}
		n, err := c.Write(buf)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write = %d, %v; want a deadline error", n, err)
		}
		if n == 0 && d < 5*time.Second {
			t.Logf("deadline %v passed before the first write; again with a longer one", d)
			continue
		}
		if n <= 0 || n >= len(buf) {
			t.Fatalf("Write reported %d bytes (deadline %v); want the part the socket buffers took", n, d)
		}
		return
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	c, _ := pair(t)
	errc := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 10)); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked after Close")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v; want net.ErrClosed", err)
	}
}

func TestEOF(t *testing.T) {
	c, s := pair(t)
	if _, err := s.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Fatalf("ReadAll = %q, %v; want \"bye\", nil", got, err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF = %d, %v", n, err)
	}
}

// TestWriteToResetPeer: the peer is gone with a reset; writes fail with
// the system's error (EPIPE or ECONNRESET) as a *net.OpError, and the
// process survives the SIGPIPE a raw write to such a socket raises.
func TestWriteToResetPeer(t *testing.T) {
	c, s := pair(t)
	if !isRaw(s) {
		t.Skip("no raw connections on " + runtime.GOOS)
	}
	tc := s.(*conn).Conn.(*net.TCPConn)
	if err := tc.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("hello"))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || !(errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("write to a reset peer: %v (%T); want a write *net.OpError with EPIPE or ECONNRESET", err, err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a reset peer succeeded")
	}
}

// TestConcurrentUse: several goroutines read and write one connection at
// once (as net.Conn allows); with -race this checks the per-direction
// state. Each writer's messages are fixed-size so the reader can count them.
func TestConcurrentUse(t *testing.T) {
	c, s := pair(t)
	const writers, msgs, size = 4, 500, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := bytes.Repeat([]byte{byte('a' + w)}, size)
			for range msgs {
				if _, err := c.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	counts := make([]int, writers)
	var mu sync.Mutex
	var rg sync.WaitGroup
	total := writers * msgs * size
	got := 0
	for range 2 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			buf := make([]byte, 777)
			for {
				mu.Lock()
				if got >= total {
					mu.Unlock()
					return
				}
				mu.Unlock()
				_ = s.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				n, err := s.Read(buf)
				mu.Lock()
				for _, b := range buf[:n] {
					counts[b-'a']++
				}
				got += n
				mu.Unlock()
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rg.Wait()
	for w, n := range counts {
		if n != msgs*size {
			t.Errorf("writer %d: %d bytes arrived, want %d", w, n, msgs*size)
		}
	}
}

// TestMain doubles as the echo peer of the benchmarks: with
// RAWNET_ECHO_LISTEN set, the test binary echoes 64-byte messages on that
// address instead of running tests, so the benchmark's process really goes
// idle while it waits (as a proxy does for its client and its backend).
// RAWNET_ECHO_RAW=1 makes the echo peer use wrapped connections too.
func TestMain(m *testing.M) {
	if addr := os.Getenv("RAWNET_ECHO_LISTEN"); addr != "" {
		echoServer(addr)
		return
	}
	os.Exit(m.Run())
}

func echoServer(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		os.Exit(3)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if os.Getenv("RAWNET_ECHO_RAW") == "1" {
			c = Wrap(c)
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 64)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// pingPongMode is how the benchmark's client socket is read and written.
type pingPongMode int

const (
	modeGo          pingPongMode = iota // net.Conn's own calls
	modeRaw                             // Wrap: raw calls, Go's netpoller
	modeBlocking                        // out of the netpoller: blocking descriptor, ordinary system calls
	modeRawBlocking                     // out of the netpoller: blocking descriptor, raw system calls
)

// benchPingPong bounces a 64-byte message off an echo server in another
// process (this test binary, see TestMain), its client socket read and
// written as mode says. The blocking modes take the socket out of Go's
// netpoller (a duplicate descriptor, the connection closed) and wait in
// read(2) itself: an experiment on what the netpoller's park and wake-up
// cost (docs/benchmarks-proxy.md, "Measured and not kept"), not a mode
// the proxy has; with raw calls the thread keeps its processor while it
// waits. Besides ns/op it reports this process's CPU time and context
// switches per round trip (getrusage).
func benchPingPong(b *testing.B, mode pingPongMode) {
	if mode >= modeBlocking && runtime.GOOS != "linux" {
		b.Skip("blocking modes: Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "RAWNET_ECHO_LISTEN="+addr)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var rw io.ReadWriter = c
	switch mode {
	case modeRaw:
		c = Wrap(c)
		rw = c
	case modeBlocking, modeRawBlocking:
		f, err := c.(*net.TCPConn).File()
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		// Closing the connection takes its descriptor out of Go's epoll
		// (the duplicate was never in it).
		c.Close()
		if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
			b.Fatal(err)
		}
		rw = blockingFD{fd: f.Fd(), raw: mode == modeRawBlocking}
	}
	defer c.Close() // a second Close of a blocking mode's is harmless
	buf := make([]byte, 64)
	var before, after syscall.Rusage
	b.ReportAllocs()
	b.ResetTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		if _, err := rw.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rw, buf); err != nil {
			b.Fatal(err)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	sw := after.Nvcsw + after.Nivcsw - before.Nvcsw - before.Nivcsw
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(sw)/float64(b.N), "switches/op")
}

// blockingFD reads and writes a blocking descriptor with ordinary or raw
// system calls.
type blockingFD struct {
	fd  uintptr
	raw bool
}

func (f blockingFD) call(trap uintptr, b []byte) (int, error) {
	for {
		var n uintptr
		var e syscall.Errno
		if f.raw {
			n, _, e = syscall.RawSyscall(trap, f.fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		} else {
			n, _, e = syscall.Syscall(trap, f.fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		}
		switch {
		case e == syscall.EINTR: // a preemption signal: call again
		case e != 0:
			return 0, e
		case n == 0 && trap == syscall.SYS_READ:
			return 0, io.EOF
		default:
			return int(n), nil
		}
	}
}

func (f blockingFD) Read(b []byte) (int, error)  { return f.call(syscall.SYS_READ, b) }
func (f blockingFD) Write(b []byte) (int, error) { return f.call(syscall.SYS_WRITE, b) }

func BenchmarkPingPongGo(b *testing.B)          { benchPingPong(b, modeGo) }
func BenchmarkPingPongRaw(b *testing.B)         { benchPingPong(b, modeRaw) }
func BenchmarkPingPongBlocking(b *testing.B)    { benchPingPong(b, modeBlocking) }
func BenchmarkPingPongRawBlocking(b *testing.B) { benchPingPong(b, modeRawBlocking) }
