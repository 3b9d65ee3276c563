package proxy

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// FuzzOKStatusRoundTrip: okStatus never reads past the payload, and on a payload
// built as a server builds an OK packet it returns the status and
// warnings written there.
func FuzzOKStatusRoundTrip(f *testing.F) {
	f.Add([]byte{mysql.EOF_HEADER, 0, 0, 2, 0, 0, 0}, uint64(0), uint64(0), uint16(2), uint16(0))
	f.Add([]byte{mysql.EOF_HEADER, 0xfc, 1}, uint64(300), uint64(1<<20), uint16(0x4002), uint16(3))
	f.Add([]byte{mysql.OK_HEADER, 0xfe, 0, 0}, uint64(1<<40), uint64(251), uint16(0x22), uint16(65535))
	f.Add([]byte{}, uint64(7), uint64(0), uint16(1), uint16(1))
	f.Fuzz(func(t *testing.T, raw []byte, affected, insertID uint64, status, warnings uint16) {
		okStatus(raw) // no panic on any input
		p := []byte{mysql.EOF_HEADER}
		p = append(p, mysql.PutLengthEncodedInt(affected)...)
		p = append(p, mysql.PutLengthEncodedInt(insertID)...)
		p = binary.LittleEndian.AppendUint16(p, status)
		p = binary.LittleEndian.AppendUint16(p, warnings)
		full := append(p, raw...) // a status message and tracking block may follow
		st, w, ok := okStatus(full)
		if !ok || st != status || w != warnings {
			t.Fatalf("okStatus(%x) = %#x %d %v, want %#x %d", full, st, w, ok, status, warnings)
		}
		if _, _, ok := okStatus(p[:len(p)-1]); ok {
			t.Fatalf("okStatus accepted a truncated packet %x", p[:len(p)-1])
		}
	})
}

// TestPrimaryWithoutDeprecateEOF: a primary whose server does not offer
// CLIENT_DEPRECATE_EOF (go-mysql's server side here; no MySQL since
// 5.7.5) is dialled with the classic framing, and counted.
func TestPrimaryWithoutDeprecateEOF(t *testing.T) {
	cfg := Config{Primary: Backend{Name: "primary", Addr: routerPrimary(t, ""), User: "u"}, ConnectTimeout: 10 * time.Second, BackendTimeout: 10 * time.Second}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "classic"})
	cfg.classicEOF = c
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bc, err := dialBackend(ctx, &cfg.Primary, account{}, "", "", 0, &cfg, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.close()
	if bc.okEOF {
		t.Fatal("okEOF on a connection whose server did not offer it")
	}
	if got := testutil.ToFloat64(c); got != 1 {
		t.Fatalf("classic-EOF primary connections counted %v, want 1", got)
	}
}

// FuzzHandleOK: an OK (or EOF) packet a server sends, however short or
// inconsistent, is parsed or refused (handleOK nil, eofFromOK's error),
// never a panic: go-mysql's HandleOKPacket indexed past a 5-byte EOF
// ending a stored procedure's result, and the session died with
// "index out of range" (main.signal). On a connection that negotiated
// session tracking (go-mysql's server side here).
func FuzzHandleOK(f *testing.F) {
	cfg := Config{Primary: Backend{Name: "primary", Addr: routerPrimary(f, ""), User: "u"}, ConnectTimeout: 10 * time.Second, BackendTimeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bc, err := dialBackend(ctx, &cfg.Primary, account{}, "", "", 0, &cfg, nil, false)
	if err != nil {
		f.Fatal(err)
	}
	defer bc.close()
	for _, p := range [][]byte{
		{mysql.EOF_HEADER, 0, 0, 2, 0},                        // the classic EOF
		{mysql.EOF_HEADER, 0, 0, 2, 0, 0, 0},                  // an OK ending a result
		{mysql.OK_HEADER, 0xfc, 1},                            // truncated length
		{mysql.OK_HEADER, 0, 0, 0x00, 0x40, 0, 0, 5, 'a'},     // info past the end
		{mysql.OK_HEADER, 0, 0, 0x00, 0x40, 0, 0, 0, 9, 0, 1}, // tracking block past the end
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) == 0 {
			return // never relayed: the relay reads the header byte first
		}
		handleOK(bc, p)
		bc.broken, bc.allGTIDs = false, true
		var out relayOut
		eof, err := eofFromOK(bc, append(make([]byte, 4), p...), &out)
		if err == nil && (len(eof) != 9 || eof[4] != mysql.EOF_HEADER) {
			t.Fatalf("eofFromOK(%x) = %x, want a classic EOF packet", p, eof)
		}
	})
}

// TestEOFFromClassicEOF: the classic 5-byte EOF where an OK was due is
// taken as one (its warnings and status), not refused as a malformed OK.
func TestEOFFromClassicEOF(t *testing.T) {
	bc := &backendConn{b: &Backend{Name: "primary"}}
	var out relayOut
	eof, err := eofFromOK(bc, []byte{0, 0, 0, 0, mysql.EOF_HEADER, 3, 0, 0x02, 0x40}, &out)
	if err != nil || out.warnings != 3 || out.status != 0x4002 {
		t.Fatalf("classic EOF: %x, %v; warnings %d status %#x", eof, err, out.warnings, out.status)
	}
	if got := binary.LittleEndian.Uint16(eof[7:]); got != 0x0002 {
		t.Fatalf("status passed to the client %#x, want the state-change flag cleared", got)
	}
}

// TestTokenEntry: the proxy's causal_token entry is MySQL's
// SESSION_TRACK_SYSTEM_VARIABLES entry (type 0, the entry's length, the
// name and the value length-encoded), byte for byte, and okStateBlock
// finds a server's block (to which the entry is appended) in an OK
// packet. A real client reading both: TestTrackedToken.
func TestTokenEntry(t *testing.T) {
	got := tokenEntry("g1.1.x")
	want := []byte{0, 20, 12, 'c', 'a', 'u', 's', 'a', 'l', '_', 't', 'o', 'k', 'e', 'n', 6, 'g', '1', '.', '1', '.', 'x'}
	if string(got) != string(want) {
		t.Fatalf("tokenEntry = %x, want %x", got, want)
	}
	gtidEntry := []byte{mysql.SESSION_TRACK_GTIDS, 5, 0, 3, 'a', ':', '1'}
	pkt := okWithBlock(7, 0, mysql.SERVER_STATUS_AUTOCOMMIT|mysql.SERVER_SESSION_STATE_CHANGED, "info", gtidEntry)
	block := okStateBlock(pkt)
	if string(block) != string(gtidEntry) {
		t.Fatalf("okStateBlock = %x, want %x", block, gtidEntry)
	}
	block = append(block[:len(block):len(block)], tokenEntry("s1.k.1")...)
	full := okWithBlock(7, 0, mysql.SERVER_STATUS_AUTOCOMMIT|mysql.SERVER_SESSION_STATE_CHANGED, "info", block)
	if string(okStateBlock(full)) != string(block) {
		t.Fatalf("okStateBlock of the rebuilt packet = %x, want %x", okStateBlock(full), block)
	}
	if b := okStateBlock(pkt[:len(pkt)-1]); b != nil {
		t.Fatalf("okStateBlock of a truncated packet = %x, want nil", b)
	}
}

// okWithBlock is an OK payload (header byte onward) in the
// CLIENT_SESSION_TRACK format with session-state block block.
func okWithBlock(affected, insertID uint64, status uint16, info string, block []byte) []byte {
	p := []byte{mysql.OK_HEADER}
	p = append(p, mysql.PutLengthEncodedInt(affected)...)
	p = append(p, mysql.PutLengthEncodedInt(insertID)...)
	p = binary.LittleEndian.AppendUint16(p, status)
	p = binary.LittleEndian.AppendUint16(p, 0)
	p = append(p, mysql.PutLengthEncodedString([]byte(info))...)
	return append(p, mysql.PutLengthEncodedString(block)...)
}

// FuzzOKStateBlock: okStateBlock never reads past the payload and finds
// the block of an OK packet built as a server builds one.
func FuzzOKStateBlock(f *testing.F) {
	f.Add([]byte{mysql.OK_HEADER, 0, 0, 2, 0x40, 0, 0, 0, 0}, uint64(1), "", []byte{2, 1, '1'})
	f.Add([]byte{mysql.OK_HEADER, 0xfc}, uint64(1<<20), "Rows matched: 1", []byte{})
	f.Add([]byte{}, uint64(0), "x", tokenEntry("s1.k2.1...0..abc"))
	f.Fuzz(func(t *testing.T, raw []byte, affected uint64, info string, block []byte) {
		okStateBlock(raw) // no panic on any input
		p := okWithBlock(affected, affected/3, mysql.SERVER_SESSION_STATE_CHANGED, info, block)
		if got := okStateBlock(p); string(got) != string(block) {
			t.Fatalf("okStateBlock(%x) = %x, want %x", p, got, block)
		}
		if len(block) > 0 && okStateBlock(p[:len(p)-1]) != nil {
			t.Fatalf("okStateBlock accepted a truncated packet %x", p[:len(p)-1])
		}
	})
}
