// Package sessiontoken is the signed session token: what a session wrote
// and what its reads were shown, each with the topology epoch it belongs
// to, signed so that any proxy of a fleet sharing the key can take it
// from a client it has never seen (MongoDB's causally consistent
// sessions carry a signed operation time the same way).
//
// Text form (only [0-9a-z.:_~-], safe in a SQL string or comment, a
// cookie, a URL query, a job payload):
//
//	s1.<key id>.<epoch>.<writes>.<seen epoch>.<seen>.<signature>
//
// <writes> and <seen> are GTID sets in gtid.Token's text (sources
// separated by "~", empty for none); <signature> is HMAC-SHA256 under the
// named key of everything before its '.', truncated to 16 bytes, in
// lower-case hex. A Keyring signs with its first key and verifies with
// any of its keys, so a rotation adds the new key first and keeps the
// previous one until the tokens it signed are no longer in use.
//
// The package is pure: no clock, no I/O. Whether a token's epochs are
// acceptable (not from the future) is the caller's check: it knows the
// topology.
package sessiontoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/causallab/causallab/gtid"
)

// Token is a session's causal state, as carried by its client.
type Token struct {
	// Epoch is the topology epoch Writes were acknowledged in (their
	// oldest part's); 0 with Writes empty.
	Epoch uint64
	// Writes are the session's acknowledged writes: a read-your-writes
	// read must see them.
	Writes gtid.Set
	// SeenEpoch is the epoch Seen was raised in (its oldest part's); 0
	// with Seen empty.
	SeenEpoch uint64
	// Seen is the monotonic-reads watermark: at least every state the
	// session's reads were shown; a later read must not see less.
	Seen gtid.Set
}

// Prefix begins every signed session token.
const Prefix = "s1."

// sigBytes is the signature's length before hex (128 bits of HMAC-SHA256).
const sigBytes = 16

// MinSecret is a key's shortest secret, in bytes.
const MinSecret = 32

// Key is one signing key.
type Key struct {
	// ID names the key in the tokens it signs: 1 to 32 of [a-z0-9_-].
	ID string
	// Secret is the HMAC key: at least MinSecret bytes.
	Secret []byte
}

// validate checks the key's ID and secret.
func (k Key) validate() error {
	if len(k.ID) == 0 || len(k.ID) > 32 {
		return fmt.Errorf("sessiontoken: key id %q: want 1 to 32 characters", k.ID)
	}
	for i := 0; i < len(k.ID); i++ {
		if c := k.ID[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("sessiontoken: key id %q: character %q at %d is not one of [a-z0-9_-]", k.ID, c, i)
		}
	}
	if len(k.Secret) < MinSecret {
		return fmt.Errorf("sessiontoken: key %q: secret of %d bytes, want at least %d", k.ID, len(k.Secret), MinSecret)
	}
	return nil
}

// Keyring signs with its first key and verifies with any of them.
type Keyring struct {
	keys []Key
}

// NewKeyring returns a keyring of keys, the first one signing; at least
// one key, each valid (Key.ID, Key.Secret), no ID twice.
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("sessiontoken: a keyring needs at least one key")
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if err := k.validate(); err != nil {
			return nil, err
		}
		if seen[k.ID] {
			return nil, fmt.Errorf("sessiontoken: key id %q given twice", k.ID)
		}
		seen[k.ID] = true
	}
	kr := &Keyring{keys: make([]Key, len(keys))}
	for i, k := range keys {
		kr.keys[i] = Key{ID: k.ID, Secret: append([]byte(nil), k.Secret...)}
	}
	return kr, nil
}

// Sign returns t's text form, signed with the keyring's first key.
func (kr *Keyring) Sign(t Token) string {
	k := kr.keys[0]
	body := body(k.ID, t)
	return body + "." + hex.EncodeToString(mac(k.Secret, body))
}

// body is the signed part of a token: everything before the signature.
func body(id string, t Token) string {
	var b strings.Builder
	b.WriteString(Prefix)
	b.WriteString(id)
	b.WriteByte('.')
	b.WriteString(setField(t.Epoch, t.Writes))
	b.WriteByte('.')
	b.WriteString(setField(t.SeenEpoch, t.Seen))
	return b.String()
}

// setField is "<epoch>.<set>" (gtid.Token's text without its prefix).
func setField(epoch uint64, s gtid.Set) string {
	return strings.TrimPrefix(gtid.Token{Epoch: epoch, GTIDs: s}.String(), "g1.")
}

// mac is the truncated HMAC-SHA256 of body under secret.
func mac(secret []byte, body string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(body))
	return h.Sum(nil)[:sigBytes]
}

// Parse verifies and reads a signed token. The signature is checked
// before anything it covers is parsed: a token it does not verify is
// refused whatever it says. Errors are *Error (errors.Is ErrMalformed,
// ErrUnknownKey, ErrBadSignature).
func (kr *Keyring) Parse(s string) (Token, error) {
	if !strings.HasPrefix(s, Prefix) {
		return Token{}, malformed("it does not begin with %q", Prefix)
	}
	dot := strings.LastIndexByte(s, '.')
	if dot < len(Prefix) {
		return Token{}, malformed("no signature")
	}
	body, sig := s[:dot], s[dot+1:]
	rest := body[len(Prefix):]
	kdot := strings.IndexByte(rest, '.')
	if kdot < 0 {
		return Token{}, malformed("no key id")
	}
	id := rest[:kdot]
	if len(sig) != 2*sigBytes {
		return Token{}, malformed("the signature has %d characters, want %d", len(sig), 2*sigBytes)
	}
	if strings.Trim(sig, "0123456789abcdef") != "" {
		return Token{}, malformed("the signature is not lower-case hex")
	}
	got, _ := hex.DecodeString(sig)
	k, ok := kr.key(id)
	if !ok {
		return Token{}, &Error{Reason: ReasonUnknownKey, Detail: fmt.Sprintf("signed with key %.32q, which this keyring does not hold", id)}
	}
	if !hmac.Equal(got, mac(k.Secret, body)) {
		return Token{}, &Error{Reason: ReasonBadSignature, Detail: "the signature does not match the token: forged or altered"}
	}
	return parseBody(rest[kdot+1:])
}

// key returns the keyring's key named id.
func (kr *Keyring) key(id string) (Key, bool) {
	for _, k := range kr.keys {
		if k.ID == id {
			return k, true
		}
	}
	return Key{}, false
}

// parseBody reads "<epoch>.<writes>.<seen epoch>.<seen>" of a verified
// token.
func parseBody(s string) (Token, error) {
	f := strings.Split(s, ".")
	if len(f) != 4 {
		return Token{}, malformed("%d fields after the key id, want 4 (epoch, writes, seen epoch, seen)", len(f))
	}
	var t Token
	var err error
	if t.Epoch, t.Writes, err = parseSet(f[0], f[1]); err != nil {
		return Token{}, malformed("writes: %v", err)
	}
	if t.SeenEpoch, t.Seen, err = parseSet(f[2], f[3]); err != nil {
		return Token{}, malformed("seen: %v", err)
	}
	return t, nil
}

// parseSet reads one epoch and set pair.
func parseSet(epoch, set string) (uint64, gtid.Set, error) {
	e, err := strconv.ParseUint(epoch, 10, 64)
	if err != nil {
		return 0, gtid.Set{}, fmt.Errorf("epoch %.24q is not a number", epoch)
	}
	tok, err := gtid.ParseToken("g1." + epoch + "." + set)
	if err != nil {
		return 0, gtid.Set{}, err
	}
	return e, tok.GTIDs, nil
}

// Reason is why a token was refused.
type Reason string

// The reasons (the proxy's error kinds and metric labels carry them as
// they are).
const (
	// ReasonMalformed: not a signed token's text.
	ReasonMalformed Reason = "token-malformed"
	// ReasonUnknownKey: signed with a key the keyring does not hold
	// (another fleet's, or one rotated out).
	ReasonUnknownKey Reason = "token-unknown-key"
	// ReasonBadSignature: the signature does not match: forged, or
	// altered after signing.
	ReasonBadSignature Reason = "token-bad-signature"
)

// Error is a refused token.
type Error struct {
	Reason Reason
	// Detail says what was wrong, without the token's secret parts.
	Detail string
}

func (e *Error) Error() string {
	return "session token refused (" + string(e.Reason) + "): " + e.Detail
}

// Is matches the sentinel of the error's reason.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrMalformed:
		return e.Reason == ReasonMalformed
	case ErrUnknownKey:
		return e.Reason == ReasonUnknownKey
	case ErrBadSignature:
		return e.Reason == ReasonBadSignature
	}
	return false
}

// Sentinels for Error reasons.
var (
	ErrMalformed    = errors.New("sessiontoken: malformed token")
	ErrUnknownKey   = errors.New("sessiontoken: unknown signing key")
	ErrBadSignature = errors.New("sessiontoken: bad signature")
)

// malformed is a ReasonMalformed error.
func malformed(format string, a ...any) *Error {
	return &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf(format, a...)}
}
