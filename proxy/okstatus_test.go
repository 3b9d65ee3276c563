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
