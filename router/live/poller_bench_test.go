package live

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// BenchmarkPollerCPU measures what one poll of a replica costs: the
// poller's own process CPU (getrusage: the poll goroutine, its timer and
// the runtime), its allocations (runtime.MemStats), and the replica's
// mysqld CPU (/proc/<pid>/stat: the local compose backend only, else not
// reported), per poll, over b.N polls of replica1 at a 1 ms interval.
// Modes: the executed query alone (no bounds), bounds as NewPoller polls
// them (log_status where it answers), and bounds on connections refused
// log_status (the joined mysqlwire.BoundsQuery), each on NewPoller's poll
// connection (mysqlwire.PollConn: raw packets) and, suffixed "-gomysql",
// on go-mysql's client (the poll connection before it); "no-poller" is the
// baseline (the same wall time with no poller: what the process and
// mysqld spend anyway), subtracted from the others' server-cpu. Under
// "writing" a writer updates a row on the primary every 2 ms, so the
// polled set changes between most polls; under "idle" it does not.
//
//	go test -count=1 -run '^$' -bench PollerCPU -benchtime 4000x ./router/live/
func BenchmarkPollerCPU(b *testing.B) {
	composetest.Need(b, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pu, rn := topo.Primary(), topo.Replicas()[0]
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	serverCPU := mysqldCPU(b, rn.Port)
	setup, err := d.Dial(ctx, pu.Addr(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS pollcpu", "DROP TABLE IF EXISTS pollcpu.t",
		"CREATE TABLE pollcpu.t (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO pollcpu.t VALUES (1, 0)"} {
		if _, err := mysqlwire.Exec(ctx, setup, q); err != nil {
			b.Fatal(err)
		}
	}
	modes := []struct {
		name    string
		bounds  bool
		refuse  bool
		noPolls bool
		gomysql bool
	}{
		{"no-poller", false, false, true, false},
		{"executed", false, false, false, false},
		{"executed-gomysql", false, false, false, true},
		{"bounds", true, false, false, false},
		{"bounds-gomysql", true, false, false, true},
		{"bounds-joined", true, true, false, false},
		{"bounds-joined-gomysql", true, true, false, true},
	}
	for _, load := range []string{"idle", "writing"} {
		for round := range 2 {
			base := map[string]float64{} // no-poller's server CPU per b.N-poll span
			for _, m := range modes {
				b.Run(fmt.Sprintf("%s/%s/round%d", load, m.name, round+1), func(b *testing.B) {
					wctx, wstop := context.WithCancel(ctx)
					var wg sync.WaitGroup
					if load == "writing" {
						wg.Go(func() {
							c, err := d.Dial(wctx, pu.Addr(), false)
							if err != nil {
								return
							}
							defer c.Close()
							t := time.NewTicker(2 * time.Millisecond)
							defer t.Stop()
							for v := 1; wctx.Err() == nil; v++ {
								if _, err := mysqlwire.Exec(wctx, c, "UPDATE pollcpu.t SET v = "+strconv.Itoa(v)+" WHERE id = 1"); err != nil {
									return
								}
								select {
								case <-wctx.Done():
								case <-t.C:
								}
							}
						})
					}
					defer func() { wstop(); wg.Wait() }()
					cfg := PollerConfig[gtid.Set]{Nodes: []Node{node(rn)}, User: pu.User, Password: pu.Password,
						Interval: time.Millisecond, Bounds: m.bounds}
					if err := cfg.validate(); err != nil {
						b.Fatal(err)
					}
					pd := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: cfg.DialTimeout, IOTimeout: cfg.PollTimeout}
					p := newPoller(cfg, func(ctx context.Context, addr string) (valueConn, error) {
						if !m.gomysql {
							c, err := pd.DialPoll(ctx, addr)
							if err != nil {
								return nil, err
							}
							if m.refuse {
								return refusedLogStatusBytes{c}, nil
							}
							return c, nil
						}
						c, err := pd.Dial(ctx, addr, false)
						if err != nil {
							return nil, err
						}
						if m.refuse {
							return refusedLogStatus{mysqlValueConn{c}}, nil
						}
						return mysqlValueConn{c}, nil
					})
					pctx, pstop := context.WithCancel(ctx)
					done := make(chan struct{})
					if !m.noPolls {
						go func() { _ = p.Run(pctx); close(done) }()
						// Past the dial and the first polls.
						for polls, _ := p.Stats(); polls < 20 && ctx.Err() == nil; polls, _ = p.Stats() {
							time.Sleep(time.Millisecond)
						}
					} else {
						close(done)
					}
					defer func() { pstop(); <-done }()
					time.Sleep(50 * time.Millisecond)
					start, _ := p.Stats()
					var ms0, ms1 runtime.MemStats
					runtime.ReadMemStats(&ms0)
					cpu0, srv0, t0 := processCPU(), serverCPU(), time.Now()
					b.ResetTimer()
					if m.noPolls {
						// As long as b.N polls take at the interval.
						time.Sleep(time.Duration(b.N) * cfg.Interval)
					} else {
						for polls, _ := p.Stats(); polls-start < uint64(b.N); polls, _ = p.Stats() {
							time.Sleep(20 * time.Millisecond)
						}
					}
					b.StopTimer()
					cpu1, srv1, el := processCPU(), serverCPU(), time.Since(t0)
					runtime.ReadMemStats(&ms1)
					end, errs := p.Stats()
					n := float64(max(end-start, 1))
					if m.noPolls {
						n = float64(b.N)
					}
					b.ReportMetric(float64(cpu1-cpu0)/n, "client-cpu-us/poll")
					b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/poll")
					b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, "B/poll")
					if srv0 >= 0 {
						// Scaled to the baseline's span: the no-poller run
						// measured what mysqld spends in b.N intervals.
						srv := float64(srv1 - srv0)
						if m.noPolls {
							base[load] = srv / el.Seconds()
						}
						b.ReportMetric(srv/n, "server-cpu-us/poll")
						if !m.noPolls {
							b.ReportMetric((srv-base[load]*el.Seconds())/n, "server-cpu-over-idle-us/poll")
						}
					}
					if !m.noPolls {
						b.ReportMetric(float64(p.LogStatusFallbacks())/n, "joined/poll")
					}
					if errs > 0 {
						b.Fatalf("%d polls failed", errs)
					}
				})
			}
		}
	}
}

// refusedLogStatus is a poll connection whose server refuses log_status
// (as to an account without BACKUP_ADMIN).
type refusedLogStatus struct{ valueConn }

func (c refusedLogStatus) ReadValue(ctx context.Context, q string) (string, error) {
	if q == mysqlwire.LogStatusQuery {
		return "", &mysql.MyError{Code: 1227, State: "42000", Message: "Access denied (refused by the benchmark)"}
	}
	return c.valueConn.ReadValue(ctx, q)
}

// refusedLogStatusBytes is refusedLogStatus for a bytesConn.
type refusedLogStatusBytes struct{ bytesConn }

var refusedByBench = &mysql.MyError{Code: 1227, State: "42000", Message: "Access denied (refused by the benchmark)"}

func (c refusedLogStatusBytes) ReadValue(ctx context.Context, q string) (string, error) {
	if q == mysqlwire.LogStatusQuery {
		return "", refusedByBench
	}
	return c.bytesConn.ReadValue(ctx, q)
}

func (c refusedLogStatusBytes) Value(deadline time.Time, q string) ([]byte, error) {
	if q == mysqlwire.LogStatusQuery {
		return nil, refusedByBench
	}
	return c.bytesConn.Value(deadline, q)
}

// processCPU is this process's user+system CPU time in microseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Sec*1e6 + int64(ru.Utime.Usec) + ru.Stime.Sec*1e6 + int64(ru.Stime.Usec)
}

// mysqldCPU returns a function reading the CPU time (microseconds, at
// the kernel's clock-tick resolution) of the mysqld listening on port,
// found among this machine's processes by the port= line of its
// --defaults-file (read through /proc/<pid>/root: the local backend runs
// mysqld in a root of its own); it returns -1 when there is none (a
// docker backend).
func mysqldCPU(b *testing.B, port int) func() int64 {
	b.Helper()
	none := func() int64 { return -1 }
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Logf("server CPU not measured: %v", err)
		return none
	}
	pid := ""
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(cmd), "\x00") {
			cnf, ok := strings.CutPrefix(arg, "--defaults-file=")
			if !ok {
				continue
			}
			raw, err := os.ReadFile("/proc/" + e.Name() + "/root" + cnf)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(raw), "\n") {
				if strings.TrimSpace(line) == "port="+strconv.Itoa(port) {
					pid = e.Name()
				}
			}
		}
	}
	if pid == "" {
		b.Logf("server CPU not measured: no mysqld process with port %d here", port)
		return none
	}
	return func() int64 {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return -1
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 13 {
			return -1
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		stt, _ := strconv.ParseInt(f[12], 10, 64)
		return (ut + stt) * 1e6 / 100 // USER_HZ
	}
}
