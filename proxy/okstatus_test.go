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
