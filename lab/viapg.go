package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// On PostgreSQL the driver runs every router through live.PGRouter (pgx:
// PostgreSQL does not speak MySQL's protocol), over commit LSNs polled
// from the standbys, and the workload is DefaultWorkload's in
// PostgreSQL's SQL (pgWorkload): the same two tables in a schema of
// database postgres, a write one autocommit statement that sets the
// session's row and increments a hot row (data-modifying WITH, the hot
// row's new version returned), a read one SELECT of both. The checks
// (ground truth from the rows) are the same; the GTID passes judge
// nothing there (serverFlavor).

// pgWorkload is DefaultWorkload on PostgreSQL: its Database names the
// schema.
type pgWorkload struct{ schema string }

// pgWorkloadOf is w on PostgreSQL; a Workload other than DefaultWorkload
// speaks MySQL's protocol and is refused (checkEngine).
func pgWorkloadOf(w Workload) (pgWorkload, error) {
	d, ok := w.(*DefaultWorkload)
	if !ok {
		return pgWorkload{}, fmt.Errorf("engine postgres runs the lab's own workload: a Workload (%T) runs MySQL statements", w)
	}
	return pgWorkload{schema: d.db()}, nil
}

// setUp creates the schema on primary p for sessions sessions and hot
// hot rows, dropping what was there.
func (w pgWorkload) setUp(ctx context.Context, p compose.Node, sessions, hot int) error {
	if sessions < 1 || hot < 1 {
		return fmt.Errorf("lab: setup needs sessions>=1 and hot>=1, got %d and %d", sessions, hot)
	}
	c, err := dialPG(ctx, p)
	if err != nil {
		return err
	}
	defer c.Close()
	s := w.schema
	for _, q := range []string{
		"DROP SCHEMA IF EXISTS " + s + " CASCADE",
		"CREATE SCHEMA " + s,
		"CREATE TABLE " + s + ".session (id INT NOT NULL PRIMARY KEY, version BIGINT NOT NULL)",
		"CREATE TABLE " + s + ".hot (id INT NOT NULL PRIMARY KEY, version BIGINT NOT NULL)",
	} {
		if err := c.exec(ctx, q); err != nil {
			return fmt.Errorf("lab: setup: %w", err)
		}
	}
	for _, t := range []struct {
		table string
		n     int
	}{{s + ".session", sessions}, {s + ".hot", hot}} {
		if err := c.exec(ctx, "INSERT INTO "+t.table+" (id, version) SELECT g, 0 FROM generate_series(0, $1::int - 1) g", t.n); err != nil {
			return fmt.Errorf("lab: setup: %w", err)
		}
	}
	return nil
}

// writeQuery is the write ($1 the hot row, $2 the session's version, $3
// the session): one statement, so one transaction; it answers the hot
// row's new version and how many session rows it set.
func (w pgWorkload) writeQuery() string {
	s := w.schema
	return "WITH h AS (UPDATE " + s + ".hot SET version = version + 1 WHERE id = $1 RETURNING version), " +
		"o AS (UPDATE " + s + ".session SET version = GREATEST(version, $2) WHERE id = $3 RETURNING id) " +
		"SELECT (SELECT version FROM h), (SELECT count(*) FROM o)"
}

// readQuery is the read ($1 the session): one row per hot row, each
// carrying the session's own version too, as DefaultWorkload.ReadQuery.
func (w pgWorkload) readQuery() string {
	s := w.schema
	return "SELECT (SELECT version FROM " + s + ".session WHERE id = $1), id, version FROM " + s + ".hot ORDER BY id"
}

// parseWrite reads writeQuery's answer: the hot row's new version.
func parseWriteRows(rows [][]any, session int, seq int64) (int64, error) {
	if len(rows) != 1 || len(rows[0]) != 2 {
		return 0, fmt.Errorf("lab: write of session %d seq %d answered %d rows, want 1 of 2 columns", session, seq, len(rows))
	}
	hot, ok1 := rows[0][0].(int64)
	n, ok2 := rows[0][1].(int64)
	if !ok1 || !ok2 || n != 1 {
		return 0, fmt.Errorf("lab: write of session %d seq %d changed no row (schema not set up?): %v", session, seq, rows[0])
	}
	return hot, nil
}

// parsePGReadRows decodes readQuery's rows into hot and returns the own
// version; any answer that does not hold exactly the expected rows is
// an error, as parseReadRows.
func parsePGReadRows(rows [][]any, session int, hot []int64) (int64, error) {
	if len(rows) != len(hot) {
		return 0, fmt.Errorf("lab: read of session %d returned %d hot rows, want %d", session, len(rows), len(hot))
	}
	var own int64
	for i, row := range rows {
		if len(row) != 3 {
			return 0, fmt.Errorf("lab: read of session %d: row %d has %d columns, want 3", session, i, len(row))
		}
		o, ok := row[0].(int64)
		if !ok {
			return 0, fmt.Errorf("lab: read of session %d: own version is %T (the session's row is missing?)", session, row[0])
		}
		id, ok := row[1].(int32)
		if !ok || int(id) != i {
			return 0, fmt.Errorf("lab: read of session %d: row %d is hot row %v", session, i, row[1])
		}
		v, ok := row[2].(int64)
		if !ok {
			return 0, fmt.Errorf("lab: read of session %d: hot version is %T", session, row[2])
		}
		if i > 0 && o != own {
			return 0, fmt.Errorf("lab: read of session %d: own version differs between rows (%d, %d)", session, own, o)
		}
		own, hot[i] = o, v
	}
	return own, nil
}

// viaPG runs one RouterSpec through live.PGRouter over its own
// standby-polling position source.
type viaPG struct {
	sp   RouterSpec
	e    *driver
	wl   pgWorkload
	rt   *live.PGRouter
	mu   []sync.Mutex // per session: a PGSession is used by one goroutine at a time
	sess []*live.PGSession
	// noToken counts writes that committed but could not be tokened
	// (live.ErrMissingGTID).
	noToken atomic.Int64
}

var _ liveRuntime = (*viaPG)(nil)

// newViaPG builds sp's router: a PGRouter over a poller of every node,
// run on bg until ctx ends.
func newViaPG(ctx context.Context, sp RouterSpec, e *driver, wl pgWorkload, bg *sync.WaitGroup) (*viaPG, error) {
	p := e.nodes.Primary()
	reps, names := replicaNodes(e)
	all := append([]live.Node{routerNode(p)}, reps...)
	pl, err := live.NewPGPoller(live.PollerConfig[gtid.PGLSN]{Nodes: all, User: p.User, Password: p.Password, Interval: e.cfg.PollInterval,
		Primary: p.Name, Logger: e.cfg.Logger}, "")
	if err != nil {
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	if err := runPoller(ctx, pl, append([]string{p.Name}, names...), bg); err != nil {
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	rt, err := live.NewPG(ctx, live.PGConfig{Primary: routerNode(p), Replicas: reps, User: p.User, Password: p.Password, Policy: sp.Policy, Cap: sp.Cap,
		Positions: pl, Epoch: e.nodes.Epoch(), StatementTimeout: e.cfg.ReadTimeout, MaxConns: int32(e.cfg.Workers), Logger: e.cfg.Logger, Seed: e.cfg.Seed})
	if err != nil {
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	// One connection per worker to every node before the run: the
	// measurement's first statements do not wait for dials.
	if err := rt.Warm(ctx, e.cfg.Workers); err != nil {
		rt.Close()
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	return &viaPG{sp: sp, e: e, wl: wl, rt: rt, mu: make([]sync.Mutex, e.cfg.Sessions), sess: make([]*live.PGSession, e.cfg.Sessions)}, nil
}

func (v *viaPG) spec() *RouterSpec { return &v.sp }

// session returns the session's PGSession; v.mu[i] must be held.
func (v *viaPG) session(i int) *live.PGSession {
	if v.sess[i] == nil {
		s := v.rt.NewSession()
		s.Live().SetConsistentReadID("session-" + strconv.Itoa(i))
		v.sess[i] = s
	}
	return v.sess[i]
}

func (v *viaPG) write(ctx context.Context, sess int, seq int64, hot int) (WriteAck, error) {
	v.mu[sess].Lock()
	defer v.mu[sess].Unlock()
	wctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	rows, pos, err := v.session(sess).ExecRows(wctx, v.wl.writeQuery(), hot, seq, sess)
	if errors.Is(err, live.ErrMissingGTID) {
		// Committed, untokened: the ground truth still judges later reads
		// against it.
		v.noToken.Add(1)
		err = nil
	}
	if err != nil {
		return WriteAck{}, err
	}
	hv, err := parseWriteRows(rows, sess, seq)
	if err != nil {
		return WriteAck{}, err
	}
	ack := WriteAck{Hot: hv}
	if pos != 0 {
		ack.GTID = pos.String()
	}
	ss := &v.e.sess[sess]
	ss.mu.Lock()
	ss.acked = seq
	ss.mu.Unlock()
	v.e.hot.ack(hot, hv)
	if g, perr := gtid.PGWrite(pos); perr == nil {
		v.e.lag.ack(g, time.Now()) // lag measurement only
	}
	return ack, nil
}

func (v *viaPG) read(ctx context.Context, sess int, out *Read) {
	v.mu[sess].Lock()
	defer v.mu[sess].Unlock()
	v.e.hot.issue(&v.e.sess[sess], out)
	rctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	rd, err := v.session(sess).Query(rctx, v.wl.readQuery(), sess)
	out.Done = v.e.since()
	if failedRead(out, err) {
		return
	}
	own, err := parsePGReadRows(rd.Rows, sess, out.Hot)
	if err != nil {
		v.e.cfg.Logger.Debug("lab: bad read", "router", v.sp.Name, "session", sess, "err", err)
		out.Outcome = router.OutError
		return
	}
	out.Own = own
	servedRead(out, rd.Read)
}

// failover tells the router about the new primary: at the new
// timeline's switch point when compose reported one (a lost LSN past it
// then fails the epoch check's rule), else at the position the router
// reads.
func (v *viaPG) failover(ctx context.Context, fr compose.FailoverResult) error {
	reps, _ := replicaNodes(v.e)
	p := routerNode(v.e.nodes.Primary())
	if fr.SwitchPoint == "" {
		return v.rt.Failover(ctx, p, reps, fr.Epoch)
	}
	sw, err := gtid.ParsePGLSN(fr.SwitchPoint)
	if err != nil {
		return fmt.Errorf("lab: router %s: the failover's switch point: %w", v.sp.Name, err)
	}
	return v.rt.FailoverAt(ctx, p, reps, fr.Epoch, sw)
}

// drift is never asked for: checkEngine refuses drift events on
// PostgreSQL (their outside readers speak MySQL's protocol).
func (v *viaPG) drift(string, int) {}

func (v *viaPG) driftErrors() int64 { return 0 }

func (v *viaPG) counters() (int64, int64) { return v.noToken.Load(), 0 }

func (v *viaPG) close() { v.rt.Close() }

// runPoller runs pl on bg until ctx ends and waits until every node
// answered once (or 10 s passed).
func runPoller[P gtid.Position[P]](ctx context.Context, pl *live.Poller[P], names []string, bg *sync.WaitGroup) error {
	bg.Add(1)
	go func() {
		defer bg.Done()
		_ = pl.Run(ctx) // returns once ctx ends; health is in the positions
	}()
	return waitHealthy(ctx, pl, names, 10*time.Second)
}
