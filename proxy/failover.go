package proxy

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router/live"
)

// Following a promotion (docs/proxy.md, "Failover"). The proxy never
// changes a server's role itself: an orchestrator (or an operator)
// promotes a replica, and the proxy follows, either told through the
// admin API (POST /admin/promote) or by discovering it (discover: each
// node's read_only and replication source, as ProxySQL's replication
// hostgroups do). A promotion:
//   - makes the promoted replica the primary of a new epoch, whose base
//     is its executed GTID set read at the promotion (the router's rule:
//     live.Router.Failover), so a token of the old epoch is served only
//     if the new primary has it;
//   - fences the old primary by epoch: no session writes to it again,
//     even if it comes back writable (it is left out of every later
//     topology: fenced);
//   - ends each session's connections of the old epoch at its next
//     command (session.rebase); a session that had a transaction open
//     there gets a clear error (failover-transaction-lost).

// topology is one epoch's roles (Server.topo): which configured backend
// is the primary and which are the replicas, with the readers of their
// watermarks. A promotion stores a new one; none is changed in place.
type topology struct {
	// epoch is the router's epoch these roles hold in.
	epoch uint64
	// primary takes the writes; replicas the routed reads (index: the
	// router's replica index).
	primary  *Backend
	replicas []*Backend
	// primaryWM reads the watermarks of reads the primary served;
	// replicaWM[i] replica i's under watermark_source query and
	// all-gtids (nil otherwise).
	primaryWM *wmReader
	replicaWM []*wmReader
}

// replicaIndex is the index of the replica named name, -1 if none is.
func (t *topology) replicaIndex(name string) int {
	return slices.IndexFunc(t.replicas, func(b *Backend) bool { return b.Name == name })
}

// holds reports whether the router's target t is this topology's node
// (a promotion may have changed the router's roles since).
func (t *topology) holds(target live.Target) bool {
	if target.Replica < 0 {
		return target.Node.Name == t.primary.Name
	}
	return target.Replica < len(t.replicas) && t.replicas[target.Replica].Name == target.Node.Name
}

// names are the topology's backend names, the primary's first.
func (t *topology) names() []string {
	out := []string{t.primary.Name}
	for _, r := range t.replicas {
		out = append(out, r.Name)
	}
	return out
}

// liveNodes are the replicas as the router's nodes.
func (t *topology) liveNodes() []live.Node {
	out := make([]live.Node, len(t.replicas))
	for i, b := range t.replicas {
		out[i] = live.Node{Name: b.Name, Addr: b.Addr, Weight: b.Weight}
	}
	return out
}

// Promotion is what a promotion did (Server.Promote, POST /admin/promote).
type Promotion struct {
	// Epoch is the new epoch; Primary the promoted node, OldPrimary the
	// fenced one.
	Epoch      uint64 `json:"epoch"`
	Primary    string `json:"primary"`
	OldPrimary string `json:"old_primary"`
	// Base is the promoted primary's executed GTID set at the promotion:
	// the new epoch's base.
	Base string `json:"base"`
	// Cause is admin (told) or discovered.
	Cause string `json:"cause"`
}

// Promotion causes (promotions_total's cause label).
const (
	causeAdmin      = "admin"
	causeDiscovered = "discovered"
)

// errPromotion is every refused promotion's (wrapped with why).
var errPromotion = errors.New("proxy: promotion refused")

// Promote makes the replica named name the primary of a new epoch
// (cause: causeAdmin or causeDiscovered). The node must already be
// writable (read_only OFF): the proxy follows a promotion an orchestrator
// made, it does not make one.
func (s *Server) Promote(ctx context.Context, name, cause string) (Promotion, error) {
	s.promoteMu.Lock()
	defer s.promoteMu.Unlock()
	if s.cfg.Source == nil && s.cfg.Positions == "binlog" {
		// binlogwatch.Group follows one primary's stream for good.
		return Promotion{}, fmt.Errorf("%w: positions binlog cannot follow a promotion yet (use positions poll)", errPromotion)
	}
	cur := s.topo.Load()
	i := cur.replicaIndex(name)
	if i < 0 {
		return Promotion{}, fmt.Errorf("%w: %q is not a replica of epoch %d (primary %s, replicas %s)",
			errPromotion, name, cur.epoch, cur.primary.Name, strings.Join(cur.names()[1:], ", "))
	}
	cand := cur.replicas[i]
	var pr prober
	defer pr.close()
	ro, _, err := pr.role(ctx, &s.cfg, cand)
	if err != nil {
		return Promotion{}, fmt.Errorf("%w: %s: %w", errPromotion, name, err)
	}
	if ro {
		return Promotion{}, fmt.Errorf("%w: %s is read_only: promote it first (the proxy follows a promotion, it does not make one)", errPromotion, name)
	}
	next := &topology{epoch: cur.epoch + 1, primary: cand}
	for j, r := range cur.replicas {
		if j == i {
			continue
		}
		next.replicas = append(next.replicas, r)
		if cur.replicaWM != nil {
			next.replicaWM = append(next.replicaWM, cur.replicaWM[j])
		}
	}
	node := live.Node{Name: cand.Name, Addr: cand.Addr}
	base, err := s.rt.ReadPosition(ctx, node)
	if err != nil {
		return Promotion{}, fmt.Errorf("%w: read %s's executed set: %w", errPromotion, name, err)
	}
	if err := s.rt.FailoverAt(node, next.liveNodes(), next.epoch, base); err != nil {
		return Promotion{}, fmt.Errorf("%w: %w", errPromotion, err)
	}
	next.primaryWM = newWMReader(&s.cfg, cand, true, s.m, s.log)
	s.startWM(next.primaryWM)
	s.fenced[cur.primary.Name] = true
	s.topo.Store(next)
	if r, ok := s.src.(retirer); ok {
		r.Retire(cur.primary.Name)
	}
	p := Promotion{Epoch: next.epoch, Primary: cand.Name, OldPrimary: cur.primary.Name, Base: base.String(), Cause: cause}
	s.m.promotions.WithLabelValues(cause).Inc()
	s.m.epoch.Set(float64(next.epoch))
	s.log.Info("promotion: new primary", "primary", p.Primary, "old_primary", p.OldPrimary, "epoch", p.Epoch, "cause", cause)
	return p, nil
}

// firstTopology is the configured roles, in epoch Config.Epoch.
func (s *Server) firstTopology() *topology {
	t := &topology{epoch: s.cfg.Epoch, primary: &s.cfg.Primary}
	t.primaryWM = newWMReader(&s.cfg, t.primary, true, s.m, s.log)
	s.wmStarted = append(s.wmStarted, t.primaryWM)
	for i := range s.cfg.Replicas {
		b := &s.cfg.Replicas[i]
		t.replicas = append(t.replicas, b)
		if s.cfg.WatermarkSource != "lazy" {
			w := newWMReader(&s.cfg, b, false, s.m, s.log)
			t.replicaWM = append(t.replicaWM, w)
			s.wmStarted = append(s.wmStarted, w)
		}
	}
	return t
}

// retirer is a position source that can stop following a node (the
// proxy's own pollers, the polled part of positions watchers).
type retirer interface{ Retire(name string) }

var (
	_ retirer = (*pollers)(nil)
	_ retirer = (*watcherSource)(nil)
)

// startWM starts w under the readers' context (Serve's), or keeps it to
// be started there when Serve has not run yet; Serve stops it.
func (s *Server) startWM(w *wmReader) {
	s.wmMu.Lock()
	defer s.wmMu.Unlock()
	s.wmStarted = append(s.wmStarted, w)
	if s.wmCtx != nil {
		w.start(s.wmCtx)
	}
}

// prober reads nodes' roles, keeping one connection per node (the
// backend's account) between rounds, as MySQL Router's metadata cache
// does: discovery adds one connection per node (discoverConns), not one
// per round.
type prober struct {
	conns map[string]*client.Conn
}

// role reads b's role: read_only (MySQL's super_read_only sets it too)
// and whether it replicates from a source (SHOW REPLICA STATUS has a
// row). A failed read closes b's connection; the next dials again.
func (p *prober) role(ctx context.Context, cfg *Config, b *Backend) (readOnly, replicating bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	c := p.conns[b.Name]
	if c == nil {
		d := &mysqlwire.Dialer{User: b.User, Password: b.Password, Timeout: cfg.ConnectTimeout, IOTimeout: cfg.ConnectTimeout, PlainIO: cfg.SocketIO != "raw"}
		if c, err = d.Dial(pctx, b.Addr, false); err != nil {
			return false, false, backendErr(b, "discover", err)
		}
		if p.conns == nil {
			p.conns = map[string]*client.Conn{}
		}
		p.conns[b.Name] = c
	}
	readOnly, replicating, err = readRole(pctx, c)
	if err != nil {
		var me *mysql.MyError
		if !errors.As(err, &me) {
			_ = c.Close()
			delete(p.conns, b.Name)
		}
		return false, false, backendErr(b, "discover", err)
	}
	return readOnly, replicating, nil
}

// readRole reads read_only and the replication source on c.
func readRole(ctx context.Context, c *client.Conn) (readOnly, replicating bool, err error) {
	r, err := mysqlwire.Exec(ctx, c, "SELECT @@GLOBAL.read_only")
	if err != nil {
		return false, false, err
	}
	v, err := r.GetInt(0, 0)
	if err != nil {
		return false, false, err
	}
	st, err := mysqlwire.Exec(ctx, c, "SHOW REPLICA STATUS")
	if err != nil {
		return false, false, err
	}
	return v != 0, st.Resultset != nil && len(st.Values) > 0, nil
}

// keepOnly closes the connections to nodes not in names (a fenced
// primary's).
func (p *prober) keepOnly(names []string) {
	for name, c := range p.conns {
		if !slices.Contains(names, name) {
			_ = c.Close()
			delete(p.conns, name)
		}
	}
}

// close closes every connection.
func (p *prober) close() {
	for name, c := range p.conns {
		_ = c.Close()
		delete(p.conns, name)
	}
}

// discover follows a promotion it finds (Config.DiscoverInterval): when
// the primary is read-only or does not answer, and exactly one replica is
// writable and replicates from no source, that replica is promoted. Two
// or more such replicas are a split the proxy does not settle (counted,
// logged once per epoch); a fenced node is never a candidate.
func (s *Server) discover(ctx context.Context) {
	t := time.NewTicker(s.cfg.DiscoverInterval)
	defer t.Stop()
	var pr prober
	defer pr.close()
	warned := uint64(0)
	for {
		// The first round at once: its connection to the primary is
		// open from the start, as the position source's are.
		s.discoverRound(ctx, func(b *Backend) (bool, bool, error) { return pr.role(ctx, &s.cfg, b) }, &warned)
		pr.keepOnly(s.topo.Load().names())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// discoverRound is one round of discovery, each node's role read by
// roleOf (prober.role: read_only, replicating); warned is the epoch an
// ambiguous round was last logged in. It returns the candidates it found
// (none while the primary is writable).
func (s *Server) discoverRound(ctx context.Context, roleOf func(*Backend) (readOnly, replicating bool, err error), warned *uint64) []string {
	cur := s.topo.Load()
	ro, _, err := roleOf(cur.primary)
	if err == nil && !ro {
		return nil // the primary is the primary
	}
	var cands []string
	for _, r := range cur.replicas {
		rro, repl, err := roleOf(r)
		if err == nil && !rro && !repl {
			cands = append(cands, r.Name)
		}
	}
	switch {
	case len(cands) == 1:
		if _, err := s.Promote(ctx, cands[0], causeDiscovered); err != nil && ctx.Err() == nil {
			s.m.discoveries.WithLabelValues("promotion-failed").Inc()
			s.log.Warn("discovery: promotion failed", "candidate", cands[0], "err", err.Error())
		}
	case len(cands) > 1:
		s.m.discoveries.WithLabelValues("ambiguous").Inc()
		if *warned != cur.epoch {
			*warned = cur.epoch
			s.log.Warn("discovery: several writable replicas without a source; not following any", "candidates", strings.Join(cands, ", "), "epoch", cur.epoch)
		}
	}
	return cands
}

// adminPromote answers POST /admin/promote?node=NAME: the promotion as
// JSON (200), 401 without the admin token (Authorization: Bearer), 409
// when it was refused, 404 when no admin token is configured.
func (s *Server) adminPromote(w http.ResponseWriter, r *http.Request) {
	if s.cfg.AdminToken == "" {
		http.Error(w, "admin API off: no admin_token configured", http.StatusNotFound)
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.AdminToken)) != 1 {
		s.m.adminRequests.WithLabelValues("promote", "unauthorized").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="causallab proxy"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	p, err := s.Promote(r.Context(), r.URL.Query().Get("node"), causeAdmin)
	if err != nil {
		s.m.adminRequests.WithLabelValues("promote", "refused").Inc()
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	s.m.adminRequests.WithLabelValues("promote", "ok").Inc()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p)
}

// failoverTxLost is the error kind of a transaction a session had open
// on a fenced primary (session.rebase).
const failoverTxLost = "failover-transaction-lost"

// failoverRetry is the error kind of a statement routed while a promotion
// changed the roles (session.conn): not run.
const failoverRetry = "failover-retry"

// rebase moves the session to the current topology when a promotion
// stored a new one since its last command: every backend connection of
// the old epoch is closed (the old primary's ends any transaction open
// there: the client gets failover-transaction-lost, once), the replica
// slots follow the new order.
func (s *session) rebase() error {
	cur := s.srv.topo.Load()
	if cur == s.topo {
		return nil
	}
	inTx := s.state.inTx()
	old := s.topo
	s.topo = cur
	s.primary.close()
	s.primary = nil
	for _, r := range s.replicas {
		r.close()
	}
	s.state.last, s.state.insertIDOn = nil, nil
	for _, p := range s.state.stmts {
		p.onPrimary, p.onReplica = nil, nil
	}
	n := len(cur.replicas)
	s.replicas, s.replicaFails, s.healthFns = make([]*backendConn, n), make([]uint64, n), nil
	if inTx {
		s.state.observeStatus(s.state.status&^mysql.SERVER_STATUS_IN_TRANS, false)
		s.cc.setInTransaction(false)
		return s.proxyErr(failoverTxLost, codeBackendLost,
			"the primary changed (%s to %s, epoch %d) inside this transaction: it is rolled back on %s and was not retried",
			old.primary.Name, cur.primary.Name, cur.epoch, old.primary.Name)
	}
	return nil
}
