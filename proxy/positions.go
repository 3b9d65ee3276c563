package proxy

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/causallab/causallab/gtid"
)

// positions is the adapter's position source: each server's executed GTID
// set, polled with SELECT @@GLOBAL.gtid_executed every PollInterval, raised
// by the GTIDs the proxy saw acknowledged (primary) and by successful waits
// (replicas). It only ever grows, so it is a lower bound of what each
// server has executed. Replace by binlogwatch when the live router lands.
type positions struct {
	mu sync.RWMutex
	// sets[0] is the primary, sets[i+1] replica i.
	sets []gtid.Set
	up   []bool
}

func newPositions(n int) *positions {
	return &positions{sets: make([]gtid.Set, n), up: make([]bool, n)}
}

// raise merges s into server i's position.
func (p *positions) raise(i int, s gtid.Set) {
	p.mu.Lock()
	if !p.sets[i].Contains(s) {
		if s.Contains(p.sets[i]) {
			p.sets[i] = s
		} else {
			p.sets[i] = p.sets[i].Union(s)
		}
	}
	p.mu.Unlock()
}

func (p *positions) setUp(i int, up bool) {
	p.mu.Lock()
	p.up[i] = up
	p.mu.Unlock()
}

// snapshot copies the positions (Sets are immutable values: copying shares
// storage safely since nobody mutates them in place).
func (p *positions) snapshot(sets []gtid.Set, up []bool) {
	p.mu.RLock()
	copy(sets, p.sets)
	copy(up, p.up)
	p.mu.RUnlock()
}

// poll keeps server i's position fresh until ctx ends.
func (p *positions) poll(ctx context.Context, i int, b *Backend, cfg *Config, log *slog.Logger) {
	var bc *backendConn
	defer func() { bc.close() }()
	t := time.NewTicker(cfg.PollInterval)
	defer t.Stop()
	failures := 0
	for {
		if bc == nil || bc.broken {
			bc.close()
			var err error
			bc, err = dialBackend(ctx, b, "", "", cfg)
			if err != nil {
				p.setUp(i, false)
				failures++
				if failures == 1 || failures%100 == 0 {
					log.Warn("position poller cannot connect", "backend", b.Name, "err", err, "failures", failures)
				}
				bc = nil
			}
		}
		if bc != nil {
			r, err := bc.exec("SELECT @@GLOBAL.gtid_executed")
			if err != nil {
				bc.broken = true
				p.setUp(i, false)
			} else {
				s, _ := r.GetString(0, 0)
				set, err := gtid.Parse(strings.Clone(s))
				if err != nil {
					log.Warn("unparsable gtid_executed", "backend", b.Name, "err", err)
				} else {
					p.raise(i, set)
					p.setUp(i, true)
					failures = 0
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
