package proxy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// A replica read whose watermark cannot be read after its result reached
// the client (the replica stopped or its connection broke between the
// two answers) used to close the client's connection: the session's
// monotonic-reads state was unknown. A client that reconnected then began
// with no watermark, so a later read could see an older world (the lab
// saw one MR violation this way under replica connection resets). Now the
// primary's executed set, read afterwards, is the watermark: the client
// keeps its connection, the fallback is counted, and later reads are held
// to at least what the primary had.
func TestWatermarkFallsBackToPrimary(t *testing.T) {
	for _, policy := range []string{"token-ryw-mr", "token-wait"} {
		t.Run(policy, func(t *testing.T) {
			var (
				mu     sync.Mutex
				served []string
			)
			s := startProxy(t, func(c *Config) {
				c.Policy = policy
				c.WatermarkSource = "query" // the pipelined watermark (lazy reads none)
				c.OnRead = func(r ReadRoute) {
					mu.Lock()
					served = append(served, r.Node)
					mu.Unlock()
				}
			})
			var faults atomic.Int64
			fault := func(backend string) error {
				if faults.Add(1) > 3 {
					return nil
				}
				return errors.New("injected: the replica's watermark answer was lost")
			}
			s.wmFault.Store(&fault)

			db := openDB(t, s, "tls=skip-verify")
			// One client connection for the whole test: database/sql
			// would quietly replace a closed one in a pool, a Conn not.
			conn, err := db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Reads until three watermarks were lost on a replica: each
			// must return its row on the same client connection.
			for i := 0; faults.Load() < 3; i++ {
				var one int
				if err := conn.QueryRowContext(context.Background(), "SELECT 1 FROM DUAL WHERE 1 = 1").Scan(&one); err != nil || one != 1 {
					t.Fatalf("read %d after %d lost watermarks: %v (%d)", i, faults.Load(), err, one)
				}
				if i > 200 {
					mu.Lock()
					t.Fatalf("200 reads, no replica read with a watermark: served %v", served)
				}
			}
			var one int
			if err := conn.QueryRowContext(context.Background(), "SELECT 1 FROM DUAL WHERE 1 = 1").Scan(&one); err != nil {
				t.Fatal(err)
			}
			m := metricText(t, s)
			if !strings.Contains(m, `causallab_proxy_watermark_fallbacks_total{source="primary"} 3`) {
				t.Fatalf("want 3 watermark fallbacks to the primary:\n%s", grepLines(m, "watermark", "client_errors", "backend_errors"))
			}
			if strings.Contains(m, `kind="watermark-read-failed"`) {
				t.Fatalf("a client was closed:\n%s", grepLines(m, "client_errors"))
			}
		})
	}
}
