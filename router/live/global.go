package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// GlobalSource is where a router.PolicyGlobal (read-all-writes) read gets
// its target, router.Input.Global: a position that contains every write
// acknowledged before the read began, by any session. The router captures
// it once per read, before the first decision, and keeps it for every
// decision after a wait (a waiting read waits for a fixed target, not for
// the primary's moving head).
type GlobalSource uint8

const (
	// GlobalPrimaryQuery (the zero value, sound): read the primary's
	// executed position (Flavor.ExecutedQuery, for MySQL
	// @@GLOBAL.gtid_executed) on a connection of the shared primary pool.
	// A write acknowledged to anyone before the read began was committed
	// on the primary before this statement ran, so the target contains it.
	// One round trip to the primary per read.
	GlobalPrimaryQuery GlobalSource = iota
	// GlobalView: the router's own view of the primary, no round trip: the
	// PositionSource's position of the primary (a binlogwatch stream on the
	// primary, or a poller) raised by every write acknowledged through this
	// router. It misses a write another process had acknowledged that the
	// stream has not delivered yet (it trails the commit by the stream's
	// latency): read-all-writes for the writes of this router's sessions,
	// and for everyone else's up to that latency. docs/router.md measures
	// the two against each other.
	GlobalView
)

func (g GlobalSource) String() string {
	switch g {
	case GlobalPrimaryQuery:
		return "primary-query"
	case GlobalView:
		return "view"
	}
	return fmt.Sprintf("global-source(%d)", uint8(g))
}

// Global-target results (the result label of
// causallab_router_global_targets_total).
const (
	globalOK    = "ok"
	globalError = "error"
)

// globalTarget captures a PolicyGlobal read's target by the configured
// source. ok false means the target is unknown (the primary could not be
// read): the decision core then never serves the read from a replica
// (router.ReasonPrimaryUnknown: a capped fallback, or a deferral). Only
// the context ending is an error.
func (r *Router[P]) globalTarget(ctx context.Context) (P, bool, error) {
	src := r.cfg.Global
	if src == GlobalView {
		r.mu.Lock()
		pos := r.st.PrimaryPos
		if p, ok := r.cfg.Positions.Position(r.st.Primary.Name); ok && !pos.Contains(p) {
			pos = pos.Union(p)
			r.st.PrimaryPos = pos
			r.st.Commits.Record(time.Now(), pos)
		}
		r.mu.Unlock()
		r.m.globals.WithLabelValues(src.String(), globalOK).Inc()
		return pos, true, nil
	}
	r.mu.Lock()
	primary, epoch := r.st.Primary, r.st.Epoch
	r.mu.Unlock()
	pos, err := r.readPrimary(ctx, primary)
	if err != nil {
		var zero P
		r.m.globals.WithLabelValues(src.String(), globalError).Inc()
		if ctx.Err() != nil {
			return zero, false, ctx.Err()
		}
		r.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "router: global target unknown", slog.String("node", primary.Name), errAttr(err))
		return zero, false, nil
	}
	r.m.globals.WithLabelValues(src.String(), globalOK).Inc()
	r.mu.Lock()
	if r.st.Primary == primary && r.st.Epoch == epoch && !r.st.PrimaryPos.Contains(pos) {
		r.st.PrimaryPos = r.st.PrimaryPos.Union(pos)
		r.st.Commits.Record(time.Now(), r.st.PrimaryPos)
	}
	r.mu.Unlock()
	return pos, true, nil
}

// readPrimary reads the primary's executed position: through the
// router's own reader when it has one (primaryReader: PGRouter's pgx
// connections; the primary pool speaks MySQL's protocol), else on a
// connection of the shared primary pool.
func (r *Router[P]) readPrimary(ctx context.Context, primary Node) (P, error) {
	if r.primaryReader != nil {
		return r.primaryReader(ctx, primary)
	}
	pc, err := r.prim.get(ctx, primary)
	if err != nil {
		var zero P
		return zero, err
	}
	pos, err := r.readPosition(ctx, pc.c)
	var me *mysql.MyError
	r.prim.put(pc, err == nil || errors.As(err, &me))
	return pos, err
}

// readNeed is what a replica must contain for this read: the session's
// token, its watermark (the MR policies) and, for PolicyGlobal with a known
// target, the target.
func readNeed[P gtid.Position[P]](st *router.Session[P], pol *router.Policy, global P, globalKnown bool) P {
	n := need(st, pol)
	if pol.Kind == router.PolicyGlobal && globalKnown && !n.Contains(global) {
		n = n.Union(global)
	}
	return n
}

// ParseGlobalSource parses primary-query or view.
func ParseGlobalSource(s string) (GlobalSource, error) {
	for _, g := range []GlobalSource{GlobalPrimaryQuery, GlobalView} {
		if s == g.String() {
			return g, nil
		}
	}
	return 0, fmt.Errorf("router: unknown global source %q (want primary-query or view)", s)
}
