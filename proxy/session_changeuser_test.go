package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

const changeUserCaps = mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH

// changeUserPayload is a COM_CHANGE_USER payload after the command byte
// (a client with changeUserCaps).
func changeUserPayload(user string, auth []byte, db string, collation uint16, plugin string) []byte {
	p := append([]byte(user), 0, byte(len(auth)))
	p = append(p, auth...)
	p = append(append(p, db...), 0, byte(collation), byte(collation>>8))
	return append(append(p, plugin...), 0)
}

func TestParseChangeUser(t *testing.T) {
	r, err := parseChangeUser(changeUserPayload("app2", []byte{1, 2, 3}, "ptest", 255, "caching_sha2_password"), changeUserCaps)
	if err != nil {
		t.Fatal(err)
	}
	if r.user != "app2" || !bytes.Equal(r.auth, []byte{1, 2, 3}) || r.db != "ptest" || r.collation != 255 || r.plugin != "caching_sha2_password" {
		t.Fatalf("parsed %+v", r)
	}
	// An old client: user and auth only.
	if r, err := parseChangeUser([]byte("u\x00\x00"), changeUserCaps); err != nil || r.user != "u" || r.db != "" {
		t.Fatalf("short form: %+v %v", r, err)
	}
	// Without CLIENT_SECURE_CONNECTION the auth response is NUL-terminated.
	if r, err := parseChangeUser([]byte("u\x00pw\x00db\x00"), 0); err != nil || string(r.auth) != "pw" || r.db != "db" {
		t.Fatalf("pre-4.1 form: %+v %v", r, err)
	}
	for _, bad := range [][]byte{nil, []byte("no-nul"), []byte("u\x00\x09ab")} {
		if _, err := parseChangeUser(bad, changeUserCaps); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestCheckScramble: the response verifies only for the right password
// and plugin; an empty password wants an empty response.
func TestCheckScramble(t *testing.T) {
	salt := mysql.RandomBuf(20)
	for _, plugin := range []string{mysql.AUTH_CACHING_SHA2_PASSWORD, mysql.AUTH_NATIVE_PASSWORD} {
		good := mysql.CalcCachingSha2Password(salt, []byte("pw"))
		if plugin == mysql.AUTH_NATIVE_PASSWORD {
			good = mysql.CalcNativePassword(salt, []byte("pw"))
		}
		if !checkScramble(plugin, salt, []string{"other", "pw"}, good) {
			t.Errorf("%s: the right scramble was refused", plugin)
		}
		if checkScramble(plugin, salt, []string{"wrong"}, good) {
			t.Errorf("%s: a scramble of another password passed", plugin)
		}
		if checkScramble(plugin, mysql.RandomBuf(20), []string{"pw"}, good) {
			t.Errorf("%s: a scramble of another salt passed", plugin)
		}
	}
	if !checkScramble(mysql.AUTH_CACHING_SHA2_PASSWORD, salt, []string{""}, nil) || checkScramble(mysql.AUTH_CACHING_SHA2_PASSWORD, salt, []string{"pw"}, nil) {
		t.Error("empty password and empty response")
	}
	// libmysqlclient's caching_sha2_password answers an empty password
	// with one NUL byte.
	if !checkScramble(mysql.AUTH_CACHING_SHA2_PASSWORD, salt, []string{""}, []byte{0}) || checkScramble(mysql.AUTH_CACHING_SHA2_PASSWORD, salt, []string{"pw"}, []byte{0}) {
		t.Error("empty password and a NUL byte")
	}
	if checkScramble(mysql.AUTH_NATIVE_PASSWORD, salt, []string{""}, []byte{0, 0}) {
		t.Error("empty password and two NUL bytes passed")
	}
}

// FuzzParseChangeUser: no payload crashes the parser or makes it keep
// more than it was given.
func FuzzParseChangeUser(f *testing.F) {
	f.Add(changeUserPayload("app2", []byte{1, 2, 3}, "ptest", 255, "caching_sha2_password"), uint32(changeUserCaps))
	f.Add([]byte("u\x00pw\x00db\x00"), uint32(0))
	f.Add([]byte("u\x00\xff"), uint32(changeUserCaps))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, caps uint32) {
		r, err := parseChangeUser(data, caps)
		if err != nil {
			return
		}
		if len(r.user)+len(r.auth)+len(r.db)+len(r.plugin) > len(data) {
			t.Fatalf("parsed more than the payload: %+v from %d bytes", r, len(data))
		}
	})
}
