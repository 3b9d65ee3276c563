package sessiontoken

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/causallab/causallab/gtid"
)

const (
	uuidA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidB = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
)

func mustSet(t testing.TB, s string) gtid.Set {
	t.Helper()
	set, err := gtid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func keyring(t testing.TB, keys ...Key) *Keyring {
	t.Helper()
	kr, err := NewKeyring(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

var (
	k1 = Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}
	k2 = Key{ID: "k2", Secret: bytes.Repeat([]byte{2}, 32)}
)

func TestRoundTrip(t *testing.T) {
	kr := keyring(t, k1)
	for _, tok := range []Token{
		{},
		{Epoch: 3, Writes: mustSet(t, uuidA+":1-5")},
		{SeenEpoch: 2, Seen: mustSet(t, uuidA+":1-9,"+uuidB+":1-3")},
		{Epoch: 4, Writes: mustSet(t, uuidA+":1-5:7"), SeenEpoch: 4, Seen: mustSet(t, uuidA+":1-9,"+uuidB+":1-3")},
	} {
		s := kr.Sign(tok)
		if strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyz.:_~-") != "" {
			t.Errorf("%q holds characters beyond [0-9a-z.:_~-]", s)
		}
		got, err := kr.Parse(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got.Epoch != tok.Epoch || got.SeenEpoch != tok.SeenEpoch || !got.Writes.Equal(tok.Writes) || !got.Seen.Equal(tok.Seen) {
			t.Errorf("%q read back as %+v, want %+v", s, got, tok)
		}
	}
}

// TestRotation: a keyring with a new key first signs with it and still
// takes what the previous key signed; one without the previous key
// refuses those as signed with an unknown key.
func TestRotation(t *testing.T) {
	tok := Token{Epoch: 1, Writes: mustSet(t, uuidA+":1-5")}
	old := keyring(t, k1).Sign(tok)
	rotated := keyring(t, k2, k1)
	if _, err := rotated.Parse(old); err != nil {
		t.Fatalf("the previous key's token after a rotation: %v", err)
	}
	if s := rotated.Sign(tok); !strings.HasPrefix(s, Prefix+"k2.") {
		t.Fatalf("the rotated keyring signs %q, not with the new key", s)
	}
	if _, err := keyring(t, k2).Parse(old); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("the retired key's token: %v, want ErrUnknownKey", err)
	}
}

// TestAlteredRefused: changing any one character of a signed token, or
// signing it with another secret under the same key id, gets it
// refused; nothing of it is taken.
func TestAlteredRefused(t *testing.T) {
	kr := keyring(t, k1)
	s := kr.Sign(Token{Epoch: 2, Writes: mustSet(t, uuidA+":1-5"), SeenEpoch: 2, Seen: mustSet(t, uuidA+":1-9")})
	for i := 0; i < len(s); i++ {
		for _, c := range []byte{'0', '9', 'a', 'f', '.', '-', ':', '~'} {
			if s[i] == c {
				continue
			}
			alt := s[:i] + string(c) + s[i+1:]
			if tok, err := kr.Parse(alt); err == nil {
				t.Fatalf("%q (character %d changed to %q) accepted: %+v", alt, i, c, tok)
			}
		}
	}
	forger := keyring(t, Key{ID: "k1", Secret: bytes.Repeat([]byte{9}, 32)})
	forged := forger.Sign(Token{Epoch: 2, Writes: mustSet(t, uuidA+":1-1000000")})
	if _, err := kr.Parse(forged); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a token signed with another secret: %v, want ErrBadSignature", err)
	}
}

func TestMalformed(t *testing.T) {
	kr := keyring(t, k1)
	for _, s := range []string{
		"", "s1", "s1.", "s1.k1", "s1.k1.", "g1.3." + uuidA + ":1-5", "s1.k1.1..0.." + strings.Repeat("0", 31),
		"s1.k1.1..0.." + strings.Repeat("G", 32), "s1.k1." + strings.Repeat("0", 32),
	} {
		if _, err := kr.Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", s, err)
		}
	}
	// A body the signer never makes, signed correctly, still fails to
	// parse as malformed (a buggy or foreign signer).
	body := Prefix + "k1.x..0."
	s := body + "." + hexMAC(k1.Secret, body)
	if _, err := kr.Parse(s); !errors.Is(err, ErrMalformed) {
		t.Errorf("%q: %v, want ErrMalformed", s, err)
	}
}

func hexMAC(secret []byte, body string) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for _, c := range mac(secret, body) {
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&15])
	}
	return b.String()
}

func TestNewKeyring(t *testing.T) {
	for _, keys := range [][]Key{
		nil,
		{{ID: "", Secret: k1.Secret}},
		{{ID: "K1", Secret: k1.Secret}},
		{{ID: "a.b", Secret: k1.Secret}},
		{{ID: strings.Repeat("a", 33), Secret: k1.Secret}},
		{{ID: "k1", Secret: []byte("short")}},
		{k1, {ID: "k1", Secret: k2.Secret}},
	} {
		if _, err := NewKeyring(keys...); err == nil {
			t.Errorf("NewKeyring(%v) accepted", keys)
		}
	}
}

// FuzzParse: Parse never panics, and what it accepts is exactly what the
// keyring's key signs for the token it read (only a signer makes a
// token that verifies).
func FuzzParse(f *testing.F) {
	kr, err := NewKeyring(k1, k2)
	if err != nil {
		f.Fatal(err)
	}
	set, _ := gtid.Parse(uuidA + ":1-5," + uuidB + ":7")
	for _, s := range []string{
		kr.Sign(Token{}), kr.Sign(Token{Epoch: 3, Writes: set, SeenEpoch: 3, Seen: set}),
		"s1.k2.1..0." + strings.Repeat("ab", 16), "s1.", "s1..", "s1.k1.18446744073709551616..0." + strings.Repeat("0", 32),
		"s1.k1.1.~~~.0.:::." + strings.Repeat("0", 32), "g1.1." + uuidA + ":1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := kr.Parse(s)
		if err != nil {
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("%q: untyped error %v", s, err)
			}
			return
		}
		id := strings.SplitN(s, ".", 3)[1]
		k, _ := kr.key(id)
		signer, _ := NewKeyring(k)
		if again := signer.Sign(tok); again != s {
			t.Fatalf("%q accepted, but its key signs %q for what it read", s, again)
		}
	})
}
