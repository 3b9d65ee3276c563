package lab

import (
	"context"
	"fmt"

	"github.com/causallab/causallab/compose"
)

// FailoverLoss is what a run's failovers lost of one router's sessions'
// acknowledged writes, read from the new primary's session rows right
// after each promotion, before any router was told of it.
type FailoverLoss struct {
	// Sessions whose last acknowledged write the new primary lacked.
	Sessions int64 `json:"sessions"`
	// Writes is how many of their write numbers it lacked, summed (a
	// session numbers its writes 1, 2, ...; a failed one keeps its number).
	Writes int64 `json:"writes"`
}

// countLost adds failover fr's losses to each router's FailoverLoss. A
// Workload other than DefaultWorkload has no session table the lab
// knows: nothing is counted (the result says so: Loss stays nil).
func (g *group) countLost(ctx context.Context, fr compose.FailoverResult) error {
	e := g.e
	w, ok := g.cfg.Workload.(*DefaultWorkload)
	if !ok || len(e.routers) == 0 {
		return nil
	}
	acked := make([]int64, len(e.sess))
	for i := range e.sess {
		e.sess[i].mu.Lock()
		acked[i] = e.sess[i].acked
		e.sess[i].mu.Unlock()
	}
	has, err := sessionVersions(ctx, flavorOf(g.cfg.Engine), e.nodes.Primary(), w.db(), len(acked))
	if err != nil {
		return fmt.Errorf("lab: failover to %s: reading the sessions' rows: %w", fr.NewPrimary, err)
	}
	e.lossMu.Lock()
	defer e.lossMu.Unlock()
	if e.loss == nil {
		e.loss = make([]FailoverLoss, len(e.routers))
	}
	for s, a := range acked {
		if a > has[s] {
			l := &e.loss[e.routerOf(s)]
			l.Sessions++
			l.Writes += a - has[s]
		}
	}
	return nil
}

// lossOf is router i's FailoverLoss, nil when none was counted.
func (e *driver) lossOf(i int) *FailoverLoss {
	e.lossMu.Lock()
	defer e.lossMu.Unlock()
	if i >= len(e.loss) {
		return nil
	}
	l := e.loss[i]
	return &l
}

// sessionVersions reads every session row's version on node p (schema
// or database db), indexed by session id.
func sessionVersions(ctx context.Context, f serverFlavor, p compose.Node, db string, sessions int) ([]int64, error) {
	q := "SELECT id, version FROM " + db + ".session"
	has := make([]int64, sessions)
	put := func(id, v int64) error {
		if id < 0 || id >= int64(sessions) {
			return fmt.Errorf("session row %d: not a session of the run (%d)", id, sessions)
		}
		has[id] = v
		return nil
	}
	if f.postgres() {
		c, err := dialPG(ctx, p)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		rows, err := c.c.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var id int32
			var v int64
			if err := rows.Scan(&id, &v); err != nil {
				return nil, err
			}
			if err := put(int64(id), v); err != nil {
				return nil, err
			}
		}
		return has, rows.Err()
	}
	c, err := dialNodeAs(ctx, f, p.Addr(), p.User, p.Password)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r, err := c.Execute(ctx, q)
	if err != nil {
		return nil, err
	}
	if r.Resultset == nil {
		return nil, fmt.Errorf("%s answered no rows", q)
	}
	for _, row := range r.Resultset.Values {
		if len(row) != 2 {
			return nil, fmt.Errorf("%s: a row of %d columns", q, len(row))
		}
		id, err := fieldInt(row[0])
		if err != nil {
			return nil, err
		}
		v, err := fieldInt(row[1])
		if err != nil {
			return nil, err
		}
		if err := put(id, v); err != nil {
			return nil, err
		}
	}
	return has, nil
}
