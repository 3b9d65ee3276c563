package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/lab"
	"github.com/causallab/causallab/router"
)

// The scale harness's client side (TestScale in scale_test.go starts it).
//
// TestScaleClients is not a test of its own: it runs only in the child
// process TestScale starts (CAUSALLAB_SCALE_CHILD=1), so that the clients'
// memory and goroutines are not in the process whose heap is measured. It
// opens CAUSALLAB_SCALE_CLIENTS connections to the proxy at
// CAUSALLAB_SCALE_ADDR, one lab session each, and judges every read with
// the lab's own ground truth (lab.DefaultWorkload's schema and statements,
// lab.Checker, lab.Tally): read-your-writes against the session's own row,
// monotonic reads against the hot rows. The proxy carries each session's
// token on its connection (no annotation is sent): the guarantees are the
// proxy's own.
//
// Protocol on stdout/stdin, one line each: "SCALE idle <json scaleIdle>"
// once every client connected (or was refused) and ran one write and one
// read; then the child waits for a line on stdin; "SCALE done <json
// scaleDone>" after the load.

// scaleIdle is the child's report once its clients are connected.
type scaleIdle struct {
	Connected int            `json:"connected"`
	Refused   int            `json:"refused"`
	Errors    map[string]int `json:"errors"`
	FirstErr  string         `json:"first_error,omitempty"`
}

// scaleDone is the child's report after the load.
type scaleDone struct {
	Tally       lab.Tally `json:"tally"`
	Writes      int64     `json:"writes"`
	WriteErrors int64     `json:"write_errors"`
	ReadErrors  int64     `json:"read_errors"`
	Reconnects  int64     `json:"reconnects"`
	// Refused counts failed reconnections of sessions whose connection
	// was lost during the load.
	Refused  int64          `json:"refused"`
	Errors   map[string]int `json:"errors"`
	FirstErr string         `json:"first_error,omitempty"`
	Seconds  float64        `json:"seconds"`
	// Violations describes the first few violating reads.
	Violations []string `json:"violations,omitempty"`
	// ViolationConns are the proxy connection ids (the handshake's) of
	// the sessions of Violations, in order: the parent prints the routes
	// the proxy gave their last reads (Config.OnRead).
	ViolationConns []uint32 `json:"violation_conns,omitempty"`
}

func scaleEnv(t *testing.T, key string, def float64) float64 {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 {
		t.Fatalf("%s=%q: want a non-negative number", key, v)
	}
	return f
}

// scaleConn is one client session's connection to the proxy, a lab.Execer.
type scaleConn struct {
	c *client.Conn
}

var _ lab.Execer = (*scaleConn)(nil)

// stmtTimeout bounds one statement of the harness (a loaded machine: far
// above any statement's time, below the run's).
const stmtTimeout = 30 * time.Second

func (s *scaleConn) Execute(ctx context.Context, q string) (*mysql.Result, error) {
	dl := time.Now().Add(stmtTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	if err := s.c.SetDeadline(dl); err != nil {
		return nil, err
	}
	return s.c.Execute(q)
}

// ExecuteWrite implements lab.Execer. The harness does not need the GTID
// (the proxy keeps the session's token): it reports none.
func (s *scaleConn) ExecuteWrite(ctx context.Context, q string) (*mysql.Result, string, error) {
	r, err := s.Execute(ctx, q)
	return r, "", err
}

// errKind names an error for the report: the MySQL error code, or "net".
func errKind(err error) string {
	var me *mysql.MyError
	if errors.As(err, &me) {
		return strconv.Itoa(int(me.Code))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "net"
}

// errLog gathers errors by kind across goroutines.
type errLog struct {
	mu    sync.Mutex
	kinds map[string]int
	first string
}

func (l *errLog) add(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = map[string]int{}
	}
	l.kinds[what+":"+errKind(err)]++
	if l.first == "" {
		l.first = what + ": " + err.Error()
	}
}

func TestScaleClients(t *testing.T) {
	if os.Getenv("CAUSALLAB_SCALE_CHILD") != "1" {
		t.Skip("the scale harness's client process (TestScale starts it)")
	}
	addr := os.Getenv("CAUSALLAB_SCALE_ADDR")
	clients := int(scaleEnv(t, "CAUSALLAB_SCALE_CLIENTS", 2000))
	seconds := scaleEnv(t, "CAUSALLAB_SCALE_SECONDS", 60)
	qps := scaleEnv(t, "CAUSALLAB_SCALE_QPS", 1)
	writeEvery := int(scaleEnv(t, "CAUSALLAB_SCALE_WRITE_EVERY", 10))
	hot := int(scaleEnv(t, "CAUSALLAB_SCALE_HOT", 8))
	if clients < 1 || qps <= 0 || writeEvery < 1 || hot < 1 || seconds <= 0 {
		t.Fatalf("bad knobs: clients=%d qps=%v write_every=%d hot=%d seconds=%v", clients, qps, writeEvery, hot, seconds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second+10*time.Minute)
	defer cancel()
	dial := func() (*scaleConn, error) {
		c, err := client.ConnectWithContext(ctx, addr, "app", "apppw", "", 20*time.Second)
		if err != nil {
			return nil, err
		}
		return &scaleConn{c: c}, nil
	}
	w := &lab.DefaultWorkload{Database: "causallab_scale"}
	setup, err := dial()
	if err != nil {
		t.Fatalf("setup connection: %v", err)
	}
	if err := w.Setup(ctx, setup, clients, hot); err != nil {
		t.Fatal(err)
	}
	setup.c.Close()

	type session struct {
		c     *scaleConn
		acked int64 // Seq of the last acknowledged write
		seq   int64
		check *lab.Checker
		tally lab.Tally
		hot   []int64
		// seen is the highest version of each hot row the session read
		// (its checker's floor), last the previous read's, lastAt when
		// it ended: a violation's report.
		seen, last []int64
		lastAt     time.Duration
	}
	sess := make([]session, clients)
	var idleErrs errLog
	// Connect (bounded concurrency: the point is holding the clients,
	// not a connect storm), then one write and one read each.
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range sess {
		s := &sess[i]
		s.check, err = lab.NewChecker(1, hot)
		if err != nil {
			t.Fatal(err)
		}
		s.hot = make([]int64, hot)
		s.seen, s.last = make([]int64, hot), make([]int64, hot)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := dial()
			if err != nil {
				idleErrs.add("connect", err)
				return
			}
			s.seq++
			if _, err := w.Write(ctx, c, i, s.seq, i%hot); err != nil {
				idleErrs.add("warm-up write", err)
				c.c.Close()
				return
			}
			s.acked = s.seq
			if _, err := w.Read(ctx, c, i, s.hot); err != nil {
				idleErrs.add("warm-up read", err)
				c.c.Close()
				return
			}
			s.c = c
		})
	}
	wg.Wait()
	idle := scaleIdle{Errors: idleErrs.kinds, FirstErr: idleErrs.first}
	for i := range sess {
		if sess[i].c != nil {
			idle.Connected++
		} else {
			idle.Refused++
		}
	}
	report := func(kind string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("SCALE %s %s\n", kind, b)
	}
	report("idle", idle)
	// Wait for the parent's go-ahead (it measures the idle proxy now).
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("waiting for the parent: %v", err)
	}

	var runErrs errLog
	var mu sync.Mutex
	var done scaleDone
	start := time.Now()
	end := start.Add(time.Duration(seconds * float64(time.Second)))
	every := time.Duration(float64(time.Second) / qps)
	for i := range sess {
		s := &sess[i]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 19))
			var writes, werr, rerr, reconn, refused int64
			defer func() {
				mu.Lock()
				done.Tally.Merge(&s.tally)
				done.Writes += writes
				done.WriteErrors += werr
				done.ReadErrors += rerr
				done.Reconnects += reconn
				done.Refused += refused
				mu.Unlock()
				if s.c != nil {
					s.c.c.Close()
				}
			}()
			if s.c == nil {
				return // refused at the start: counted in the idle report
			}
			next := start.Add(time.Duration(rng.Int64N(int64(every))))
			for {
				if next.After(end) {
					return
				}
				time.Sleep(time.Until(next))
				next = next.Add(every)
				if s.c == nil {
					// Lost during the load: a new connection starts
					// a new proxy session (its token and watermark are
					// gone), so the checker's session starts over too.
					c, err := dial()
					if err != nil {
						refused++
						runErrs.add("reconnect", err)
						continue
					}
					reconn++
					s.c = c
					s.check, _ = lab.NewChecker(1, hot)
					s.acked = 0
					clear(s.seen)
				}
				if rng.IntN(writeEvery) == 0 {
					s.seq++
					if _, err := w.Write(ctx, s.c, i, s.seq, rng.IntN(hot)); err != nil {
						werr++
						runErrs.add("write", err)
						var me *mysql.MyError
						if !errors.As(err, &me) {
							s.c.c.Close()
							s.c = nil
						}
						continue
					}
					writes++
					s.acked = s.seq
					continue
				}
				r := lab.Read{Session: 0, AckedSeq: s.acked, Hot: s.hot}
				own, err := w.Read(ctx, s.c, i, s.hot)
				if err != nil {
					rerr++
					runErrs.add("read", err)
					r.Outcome = router.OutError
					var me *mysql.MyError
					if !errors.As(err, &me) {
						s.c.c.Close()
						s.c = nil
					}
				} else {
					r.Own, r.Outcome = own, router.OutProxied
				}
				v, err := s.check.Check(&r)
				if err != nil {
					t.Error(err)
					return
				}
				s.tally.Add(&r, v)
				at := time.Since(start)
				if v.RYW || v.MR {
					mu.Lock()
					if len(done.Violations) < 10 {
						var conn uint32
						if s.c != nil {
							conn = s.c.c.GetConnectionID()
						}
						done.Violations = append(done.Violations, fmt.Sprintf(
							"session %d (proxy connection %d) read ending at %.3fs: ryw=%v (own %d, acked %d) mr=%v (hot row %d now %d, had seen %d); hot rows now %v, seen %v, previous read (ended %.3fs) %v",
							i, conn, at.Seconds(), v.RYW, r.Own, r.AckedSeq, v.MR, v.MRRow, r.Hot[v.MRRow], s.seen[v.MRRow],
							r.Hot, s.seen, s.lastAt.Seconds(), s.last))
						done.ViolationConns = append(done.ViolationConns, conn)
					}
					mu.Unlock()
				}
				if err == nil {
					for h, ver := range s.hot {
						s.seen[h] = max(s.seen[h], ver)
					}
					copy(s.last, s.hot)
					s.lastAt = at
				}
			}
		})
	}
	wg.Wait()
	done.Seconds = time.Since(start).Seconds()
	done.Errors, done.FirstErr = runErrs.kinds, runErrs.first
	report("done", done)
}
