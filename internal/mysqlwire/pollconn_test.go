package mysqlwire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// answerFrame joins payloads into packets with sequence numbers from 1, as a
// server answers a COM_QUERY.
func answerFrame(payloads ...[]byte) []byte {
	var b []byte
	for i, p := range payloads {
		n := len(p)
		b = append(b, byte(n), byte(n>>8), byte(n>>16), byte(i+1))
		b = append(b, p...)
	}
	return b
}

var (
	colCount1 = []byte{1}
	// colDef is a column definition (its content is not read).
	colDef   = append([]byte{3, 'd', 'e', 'f'}, bytes.Repeat([]byte{1, 'x'}, 5)...)
	eofPkt   = []byte{0xfe, 0, 0, 2, 0}
	okEOFPkt = []byte{0xfe, 0, 0, 2, 0, 0, 0}
	errPkt   = append([]byte{0xff, 0xbb, 0x04, '#', '4', '2', '0', '0', '0'}, "Access denied"...)
)

func textRow(vals ...string) []byte {
	var b []byte
	for _, v := range vals {
		b = append(b, byte(len(v)))
		b = append(b, v...)
	}
	return b
}

const pollSet = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7"

func TestParseValueAnswer(t *testing.T) {
	classic, deprecate := Caps{}, Caps{DeprecateEOF: true}
	for _, tc := range []struct {
		name   string
		b      []byte
		caps   Caps
		want   string
		null   bool
		server bool // the server's refusal
		bad    bool // another error
	}{
		{name: "classic", b: answerFrame(colCount1, colDef, eofPkt, textRow(pollSet), eofPkt), caps: classic, want: pollSet},
		{name: "deprecate-eof", b: answerFrame(colCount1, colDef, textRow(pollSet), okEOFPkt), caps: deprecate, want: pollSet},
		{name: "empty value", b: answerFrame(colCount1, colDef, eofPkt, textRow(""), eofPkt), caps: classic, want: ""},
		{name: "null", b: answerFrame(colCount1, colDef, eofPkt, []byte{0xfb}, eofPkt), caps: classic, null: true},
		{name: "two rows, two columns", b: answerFrame([]byte{2}, colDef, colDef, eofPkt, textRow(pollSet, "x"), textRow("y", "z"), eofPkt), caps: classic, want: pollSet},
		{name: "refused", b: answerFrame(errPkt), caps: classic, server: true},
		{name: "refused mid-rows", b: answerFrame(colCount1, colDef, textRow(pollSet), errPkt), caps: deprecate, server: true},
		{name: "no row", b: answerFrame(colCount1, colDef, eofPkt, eofPkt), caps: classic, bad: true},
		{name: "ok, no result pollSet", b: answerFrame([]byte{0, 0, 0, 2, 0, 0, 0}), caps: classic, bad: true},
		{name: "no eof after columns", b: answerFrame(colCount1, colDef, textRow(pollSet), eofPkt), caps: classic, bad: true},
		{name: "zero columns", b: answerFrame([]byte{0xfc, 0, 0}, colDef), caps: classic, bad: true},
		{name: "too many columns", b: answerFrame([]byte{0xfc, 0x01, 0x10}), caps: classic, bad: true},
		{name: "empty packet", b: answerFrame([]byte{}), caps: classic, bad: true},
		{name: "bad row", b: answerFrame(colCount1, colDef, eofPkt, []byte{9, 'a'}, eofPkt), caps: classic, bad: true},
		{name: "local infile", b: answerFrame([]byte{0xfb, 'f'}), caps: classic, bad: true},
		{name: "split packet", b: []byte{0xff, 0xff, 0xff, 1}, caps: classic, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, used, err := ParseValueAnswer(tc.b, tc.caps)
			switch {
			case tc.server:
				var me *mysql.MyError
				if !errors.As(err, &me) || me.Code != 1211 || me.State != "42000" {
					t.Fatalf("err %v, want the server's refusal", err)
				}
				if used != len(tc.b) {
					t.Errorf("used %d of %d", used, len(tc.b))
				}
				return
			case tc.bad:
				if err == nil || IsServerError(err) || errors.Is(err, ErrShortAnswer) {
					t.Fatalf("err %v, want a broken answer", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if used != len(tc.b) {
				t.Errorf("used %d of %d", used, len(tc.b))
			}
			if string(v) != tc.want || (v == nil) != tc.null {
				t.Errorf("value %q (nil %v), want %q (null %v)", v, v == nil, tc.want, tc.null)
			}
			// Every strict prefix asks for more; trailing bytes are not
			// taken.
			for i := range len(tc.b) {
				if _, _, err := ParseValueAnswer(tc.b[:i], tc.caps); !errors.Is(err, ErrShortAnswer) {
					t.Fatalf("prefix of %d bytes: %v, want ErrShortAnswer", i, err)
				}
			}
			more := append(append([]byte(nil), tc.b...), answerFrame(errPkt)...)
			if v2, used2, err := ParseValueAnswer(more, tc.caps); err != nil || used2 != used || !bytes.Equal(v2, v) {
				t.Errorf("with bytes after it: %q, %d, %v", v2, used2, err)
			}
		})
	}
	// Out of sequence.
	b := answerFrame(colCount1, colDef, eofPkt, textRow(pollSet), eofPkt)
	b[4+len(colCount1)+3]++ // the column definition's sequence number
	if _, _, err := ParseValueAnswer(b, classic); err == nil || errors.Is(err, ErrShortAnswer) {
		t.Errorf("out of sequence: %v", err)
	}
}

func TestAppendQueryPacket(t *testing.T) {
	for _, caps := range []Caps{{}, {QueryAttributes: true}} {
		got := AppendQueryPacket([]byte("prefix"), caps, ExecutedQuery)
		if want := append([]byte("prefix"), QueryPacket(caps, ExecutedQuery)...); !bytes.Equal(got, want) {
			t.Errorf("caps %+v: %x, want %x", caps, got, want)
		}
	}
}

// FuzzParseValueAnswer: any input gives an answer, ErrShortAnswer or an
// error, never a panic; an answer lies within the input and parses the
// same with bytes after it; a refusal is a *mysql.MyError.
func FuzzParseValueAnswer(f *testing.F) {
	f.Add(answerFrame(colCount1, colDef, eofPkt, textRow(pollSet), eofPkt), false)
	f.Add(answerFrame(colCount1, colDef, textRow(pollSet), okEOFPkt), true)
	f.Add(answerFrame(colCount1, colDef, eofPkt, []byte{0xfb}, eofPkt), false)
	f.Add(answerFrame(errPkt), false)
	f.Add(answerFrame([]byte{2}, colDef, colDef, textRow(pollSet, "x"), textRow("y", "z"), okEOFPkt), true)
	f.Add([]byte{0xff, 0xff, 0xff, 1}, false)
	f.Fuzz(func(t *testing.T, b []byte, deprecateEOF bool) {
		caps := Caps{DeprecateEOF: deprecateEOF}
		v, used, err := ParseValueAnswer(b, caps)
		if err != nil {
			if IsServerError(err) && (used <= 0 || used > len(b)) {
				t.Fatalf("refusal ending at %d of %d", used, len(b))
			}
			return
		}
		if used <= 0 || used > len(b) {
			t.Fatalf("used %d of %d", used, len(b))
		}
		if v != nil {
			if len(v) > used {
				t.Fatalf("value of %d bytes in an answer of %d", len(v), used)
			}
		}
		more := append(append([]byte(nil), b[:used]...), 0, 0, 0, 0)
		v2, used2, err := ParseValueAnswer(more, caps)
		if err != nil || used2 != used || !bytes.Equal(v, v2) {
			t.Fatalf("with bytes after it: %q %d %v, want %q %d", v2, used2, err, v, used)
		}
	})
}
