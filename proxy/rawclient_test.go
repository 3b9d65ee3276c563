package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// rawConn is a logged-in MySQL protocol connection the test drives packet
// by packet (go-mysql's client does the handshake, caching_sha2_password
// over TLS or its RSA exchange, then steps aside).
type rawConn struct {
	t  testing.TB
	cc *client.Conn
	nc net.Conn // the connection under the packet layer (TLS or plain)
}

// rawLogin logs in to addr as user/password and returns the connection for
// raw packet I/O.
func rawLogin(t testing.TB, addr, user, password string, useTLS bool) *rawConn {
	t.Helper()
	rc, err := tryRawLogin(addr, user, password, useTLS)
	if err != nil {
		t.Fatalf("login to %s: %v", addr, err)
	}
	rc.t = t
	t.Cleanup(func() { rc.nc.Close() })
	return rc
}

func tryRawLogin(addr, user, password string, useTLS bool) (*rawConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := &net.Dialer{Timeout: 10 * time.Second}
	cc, err := client.ConnectWithDialer(ctx, "tcp", addr, user, password, "", d.DialContext, func(c *client.Conn) error {
		if useTLS {
			c.SetTLSConfig(&tls.Config{InsecureSkipVerify: true})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &rawConn{cc: cc, nc: cc.Conn.Conn}, nil
}

// write sends payload as packets starting at sequence seq (split at
// 0xffffff bytes as the protocol does).
func (r *rawConn) write(seq byte, payload []byte) {
	r.t.Helper()
	if err := writePackets(r.nc, seq, payload); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func writePackets(w io.Writer, seq byte, payload []byte) error {
	for {
		n := min(len(payload), 0xffffff)
		hdr := []byte{byte(n), byte(n >> 8), byte(n >> 16), seq}
		if n < 1<<16 {
			hdr = append(hdr, payload[:n]...)
		} else if _, err := w.Write(hdr); err != nil {
			return err
		} else {
			hdr = payload[:n] // big: written as it is, not copied
		}
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		payload = payload[n:]
		seq++
		if n < 0xffffff {
			return nil
		}
	}
}

// read reads one packet within 10 s.
func (r *rawConn) read() (byte, []byte, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	return readPacket(r.nc)
}

func readPacket(rd io.Reader) (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(rd, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	p := make([]byte, n)
	if _, err := io.ReadFull(rd, p); err != nil {
		return 0, nil, err
	}
	return hdr[3], p, nil
}

// answer is a server's reply to one command, reduced to what the tests
// compare.
type answer struct {
	seq  byte
	kind string // "ok", "err", "eof", "data", "closed"
	code uint16
	msg  string
}

func (a answer) String() string {
	if a.kind == "err" {
		return fmt.Sprintf("err %d (seq %d) %s", a.code, a.seq, a.msg)
	}
	return fmt.Sprintf("%s (seq %d)", a.kind, a.seq)
}

// reply reads the first packet of the server's answer.
func (r *rawConn) reply() answer {
	seq, p, err := r.read()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return answer{kind: "timeout"}
		}
		return answer{kind: "closed"}
	}
	return classifyAnswer(seq, p)
}

func classifyAnswer(seq byte, p []byte) answer {
	switch {
	case len(p) > 0 && p[0] == mysql.OK_HEADER:
		return answer{seq: seq, kind: "ok"}
	case len(p) >= 3 && p[0] == mysql.ERR_HEADER:
		a := answer{seq: seq, kind: "err", code: binary.LittleEndian.Uint16(p[1:3])}
		if len(p) > 9 && p[3] == '#' {
			a.msg = string(p[9:])
		} else {
			a.msg = string(p[3:])
		}
		return a
	case len(p) > 0 && p[0] == mysql.EOF_HEADER && len(p) < 9:
		return answer{seq: seq, kind: "eof"}
	}
	return answer{seq: seq, kind: "data"}
}

// ping checks the connection still answers COM_PING with OK.
func (r *rawConn) ping() error {
	if err := writePackets(r.nc, 0, []byte{mysql.COM_PING}); err != nil {
		return err
	}
	if a := r.reply(); a.kind != "ok" {
		return fmt.Errorf("COM_PING answered %v", a)
	}
	return nil
}

// exec runs q on rc's client and fails the test on an error.
func (rc *rawConn) exec(t testing.TB, q string) *mysql.Result {
	t.Helper()
	r, err := rc.cc.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

// value runs q and returns its first column of its first row (a copy),
// false when that is NULL.
func (rc *rawConn) value(t testing.TB, q string) (string, bool) {
	t.Helper()
	r := rc.exec(t, q)
	if null, err := r.IsNull(0, 0); err != nil || null {
		return "", false
	}
	v, err := r.GetString(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Clone(v), true
}
