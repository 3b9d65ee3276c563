package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// greetingFor builds a protocol-10 greeting carrying salt (as go-mysql's
// server writes it), header included.
func greetingFor(salt []byte) []byte {
	p := []byte{0, 0, 0, 0, 10}
	p = append(p, "8.4.0-causallab"...)
	p = append(p, 0, 1, 0, 0, 0)
	p = append(p, salt[:8]...)
	p = append(p, 0, 0xff, 0xff, 45, 2, 0, 0xff, 0xff, 21)
	p = append(p, make([]byte, 10)...)
	p = append(p, salt[8:]...)
	p = append(p, 0)
	p = append(p, mysql.AUTH_CACHING_SHA2_PASSWORD...)
	p = append(p, 0)
	n := len(p) - 4
	p[0], p[1], p[2] = byte(n), byte(n>>8), byte(n>>16)
	return p
}

func switchFor(salt []byte) []byte {
	p := append([]byte{0, 0, 0, 2, mysql.EOF_HEADER}, mysql.AUTH_CACHING_SHA2_PASSWORD...)
	p = append(append(append(p, 0), salt...), 0)
	n := len(p) - 4
	p[0], p[1], p[2] = byte(n), byte(n>>8), byte(n>>16)
	return p
}

// TestScrambleOf: the scramble of the greeting and of an authentication
// switch (passthroughAuth's RSA exchange decrypts with it); nothing from
// other packets.
func TestScrambleOf(t *testing.T) {
	salt := []byte("0123456789abcdefghij")
	if got := scrambleOf(greetingFor(salt), true); !bytes.Equal(got, salt) {
		t.Fatalf("greeting: %q", got)
	}
	if got := scrambleOf(switchFor(salt), false); !bytes.Equal(got, salt) {
		t.Fatalf("switch: %q", got)
	}
	for _, p := range [][]byte{nil, {1, 0, 0, 2, mysql.OK_HEADER}, {3, 0, 0, 2, mysql.MORE_DATE_HEADER, 1, 4}, greetingFor(salt)[:30]} {
		if got := scrambleOf(p, false); got != nil {
			t.Fatalf("%q: %q", p, got)
		}
	}
}

func FuzzScrambleOf(f *testing.F) {
	salt := []byte("0123456789abcdefghij")
	f.Add(greetingFor(salt), true)
	f.Add(switchFor(salt), false)
	f.Add([]byte{3, 0, 0, 2, mysql.MORE_DATE_HEADER, 1, 4}, false)
	f.Add([]byte{0xff, 0xff, 0xff, 0, 10}, true)
	f.Fuzz(func(t *testing.T, pkt []byte, greeting bool) {
		if s := scrambleOf(pkt, greeting); s != nil && len(s) != 20 {
			t.Fatalf("scramble of %d bytes", len(s))
		}
	})
}
