package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/proxy"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// viaProxy runs one RouterSpec through `causallab proxy`: a proxy.Server
// started in-process on a loopback port against the same topology (its
// positions: the run's binlogwatch WatchSource), and a pool of MySQL
// client connections to it. Lab session i always uses connection
// i % len(conns), so the proxy's per-connection monotonic-reads watermark
// covers every read that session made before (it also covers the other
// sessions sharing the connection: more cautious, never less). A read or
// write that outlives ReadTimeout closes the connection and the next
// statement dials a new one, a new proxy session whose watermark starts
// empty: each read records its connection (Read.Conn), and the checker
// counts a read after such a reconnect apart (Tally.Reconnects,
// MRAcrossReconnect).
//
// Tokens travel as a client without session tracking would carry them:
// after each write the lab reads the connection's token (SELECT
// @causal_token), clears it (SET @causal_token to the empty string), keeps it in the lab
// session, and sends it with each later read of that session in a
// /* consistent_read_id:session-<i>, causal_token:<token> */ comment.
type viaProxy struct {
	sp RouterSpec
	e  *driver
	// srvs are the fleet's proxies (Config.Proxies; the first one's router
	// carries the drift load).
	srvs   []*proxy.Server
	cancel context.CancelFunc
	done   chan error

	// conns[w][p] is worker w's connection to proxy p.
	conns [][]proxyConn
	tokMu []sync.Mutex // per session, guards toks[i], sessToks[i], stmts[i]
	toks  []gtid.Token
	// sessToks[i] is session i's signed session token under
	// TokenScopeSession (what SELECT @causal_token last said); stmts[i]
	// counts its statements (which proxy the next one goes to).
	sessToks []string
	stmts    []int
	// serial[i] holds session i's statement under TokenScopeSession from
	// the token it sets to the token it keeps: a session's write and read
	// may overlap in the driver, and a signed token cannot be merged by
	// its client, so the one kept last would drop what the other added
	// (a read's token kept after a concurrent write's lacks the write).
	serial []sync.Mutex
	// noToken counts writes after which the proxy returned no token.
	noToken atomic.Int64
	// trackedToks counts writes whose token came in their OK packet
	// (the proxy's session tracking) under TokenScopeSession.
	trackedToks atomic.Int64
	// routes holds the proxies' report of each connection's last routed
	// read (proxy.Config.OnRead), by routeKey.
	routes sync.Map // uint64 -> proxy.ReadRoute
	// drifts is the drift events' outside load through the proxy's router.
	drifts *drifter[gtid.Set]
	// fo is what a failover did to the proxy's writes (failover).
	fo proxyFailover
}

// proxyFailover follows the proxy through failovers: the current
// primary's server UUID, when the proxy was told of the latest
// promotion, and the writes after it: acknowledged by another server than
// the current primary (oldPrimaryWrites: the fencing failed), failed, and
// the first acknowledged one (resume).
type proxyFailover struct {
	mu sync.Mutex
	// current is the promoted primary's writer source under flavor's
	// writeID.
	current          gtid.SID
	flavor           serverFlavor
	promotedAt       time.Time
	resumed          bool
	resume           time.Duration
	promotions       int
	oldPrimaryWrites int64
	failedWrites     int64
}

type proxyConn struct {
	mu sync.Mutex
	c  *nodeConn
	// used counts the statements on c (Config.ReconnectEvery).
	used int
}

var _ routerRuntime = (*viaProxy)(nil)

// proxyPolicyName is the proxy's policy name for p, or an error when the
// proxy cannot express p (it takes a policy kind, a hash mode, a wait
// budget, the default window, and always checks epochs).
// A +defer policy is carried by every read's causal_policy annotation
// instead (readAnnotation).
func proxyPolicyName(p router.Policy) (string, error) {
	switch {
	case p.Kind == router.PolicyWindow && p.Window != 0 && p.Window != router.DefaultWindow:
		return "", fmt.Errorf("the proxy's window is fixed at %v", router.DefaultWindow)
	}
	return p.Kind.String(), nil
}

// readAnnotation is the comment a read of session sess carries: its
// affinity id, its token (when it has one) and, for a +defer policy, the
// policy itself (the proxy's configuration has no defer; the statement's
// annotation sets it for that read).
func readAnnotation(p router.Policy, sess int, tok gtid.Token) string {
	prefix := "/* consistent_read_id:session-" + strconv.Itoa(sess)
	if !tok.IsZero() {
		prefix += ", causal_token:" + tok.String()
	}
	if p.Defer {
		prefix += ", causal_policy=" + p.String()
	}
	return prefix + " */ "
}

func newViaProxy(ctx context.Context, sp RouterSpec, e *driver, src live.PositionSource[gtid.Set]) (*viaProxy, error) {
	name, err := proxyPolicyName(sp.Policy)
	if err != nil {
		return nil, fmt.Errorf("lab: router %s via proxy: %w", sp.Name, err)
	}
	if sp.Cap.PerSecond > 0 && sp.Cap.Behavior != router.CapFailFast {
		return nil, fmt.Errorf("lab: router %s via proxy: the proxy's fallback cap fails fast only", sp.Name)
	}
	p := e.nodes.Primary()
	backend := func(n string, addr string) proxy.Backend {
		return proxy.Backend{Name: n, Addr: addr, User: p.User, Password: p.Password}
	}
	v := &viaProxy{sp: sp, e: e, done: make(chan error, e.cfg.Proxies),
		conns: make([][]proxyConn, e.cfg.Workers), tokMu: make([]sync.Mutex, e.cfg.Sessions), toks: make([]gtid.Token, e.cfg.Sessions),
		sessToks: make([]string, e.cfg.Sessions), stmts: make([]int, e.cfg.Sessions), serial: make([]sync.Mutex, e.cfg.Sessions)}
	for w := range v.conns {
		v.conns[w] = make([]proxyConn, e.cfg.Proxies)
	}
	cfg := proxy.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Users: []proxy.User{{Name: p.User, Password: p.Password}},
		AuthMethod: mysql.AUTH_NATIVE_PASSWORD, Primary: backend(p.Name, p.Addr()), Policy: name,
		WaitBudget: sp.Policy.WaitBudget, FallbackPerSecond: sp.Cap.PerSecond, Epoch: max(e.nodes.Epoch(), 1),
		Source: src, Logger: e.cfg.Logger, HashMode: sp.Policy.HashMode.String(), GlobalSource: e.cfg.GlobalSource.String(),
		// The lab tells the proxy of a failover (failover), as an
		// orchestrator would.
		Discover: "off", FleetMembers: e.cfg.Proxies}
	if e.cfg.TokenScope == TokenScopeSession {
		cfg.TokenKeys = []proxy.TokenKey{{ID: "lab", Secret: fleetSecret}}
	}
	if src == nil {
		// Config.Positions: the proxy's own pollers (`positions: poll`).
		cfg.Positions, cfg.PollInterval = string(PositionsPoll), e.cfg.PollInterval
	}
	cfg.WatermarkSource = string(e.cfg.WatermarkSource)
	cfg.Engine = string(flavorOf(e.cfg.Engine).engine)
	var names []string
	for i, r := range e.nodes.Replicas() {
		b := backend(r.Name, r.Addr())
		b.Weight = weightOf(e.cfg.Weights, i)
		cfg.Replicas = append(cfg.Replicas, b)
		names = append(names, r.Name)
	}
	for i := range e.cfg.Proxies {
		// Each proxy numbers its connections from 1: its reports are kept
		// under (proxy, connection).
		pcfg := cfg
		pcfg.OnRead = func(r proxy.ReadRoute) { v.routes.Store(routeKey(i, r.Conn), r) }
		srv, err := proxy.New(pcfg)
		if err != nil {
			return nil, fmt.Errorf("lab: router %s via proxy: %w", sp.Name, err)
		}
		if err := srv.Listen(ctx); err != nil {
			return nil, fmt.Errorf("lab: router %s via proxy: %w", sp.Name, err)
		}
		v.srvs = append(v.srvs, srv)
	}
	table, err := hashTable(names, e.cfg.Weights)
	if err != nil {
		return nil, fmt.Errorf("lab: router %s via proxy: %w", sp.Name, err)
	}
	pctx, cancel := context.WithCancel(ctx)
	v.cancel = cancel
	v.drifts = newDrifter(pctx, v.srvs[0].Router(), table, names)
	for _, srv := range v.srvs {
		go func() { v.done <- srv.Serve(pctx) }()
	}
	return v, nil
}

// fleetSecret is the fleet key of the lab's proxies under
// TokenScopeSession (in-process, loopback only: no secret to keep).
const fleetSecret = "causallab-lab-fleet-key-0123456789abcdef"

func (v *viaProxy) spec() *RouterSpec { return &v.sp }

// conn returns the connection session sess's next statement runs on,
// locked; call unlock after. It is worker sess mod Workers' connection to
// proxy k mod Proxies, k the session's statement count (the statements of
// a session are dealt across the fleet), redialled after ReconnectEvery
// statements. Under TokenScopeSession the session's token is set on it
// first (SET @causal_token): what the session wrote and was shown, on
// whichever proxy and connection.
// routeKey names connection id of proxy i (each proxy numbers its own).
func routeKey(i int, id uint32) uint64 { return uint64(i)<<32 | uint64(id) }

// scopeOf is the monotonic-reads scope of a read on connection id of
// proxy i (Read.Conn): unique across the fleet, as the proxies' own ids
// are not (proxy i+1 in the top 8 bits, the id's low 24 below).
func scopeOf(i int, id uint32) uint32 { return uint32(i+1)<<24 | id&(1<<24-1) }

func (v *viaProxy) conn(ctx context.Context, sess int) (*nodeConn, int, func(), error) {
	v.tokMu[sess].Lock()
	k, tok := v.stmts[sess], v.sessToks[sess]
	v.stmts[sess]++
	v.tokMu[sess].Unlock()
	proxyIdx := k % len(v.srvs)
	pc := &v.conns[sess%len(v.conns)][proxyIdx]
	pc.mu.Lock()
	if pc.c != nil && v.e.cfg.ReconnectEvery > 0 && pc.used >= v.e.cfg.ReconnectEvery {
		pc.c.Close()
		pc.c = nil
	}
	if pc.c == nil {
		p := v.e.nodes.Primary()
		c, err := dialNode(ctx, v.srvs[proxyIdx].Addr(), p.User, p.Password)
		if err != nil {
			pc.mu.Unlock()
			return nil, 0, nil, err
		}
		pc.c, pc.used = c, 0
	}
	pc.used++
	if tok != "" {
		if _, err := pc.c.Execute(ctx, "SET @causal_token = '"+tok+"'"); err != nil {
			pc.mu.Unlock()
			return nil, 0, nil, fmt.Errorf("lab: setting the session's token: %w", err)
		}
	}
	return pc.c, proxyIdx, pc.mu.Unlock, nil
}

// keepToken reads the connection's token after session sess's statement
// (TokenScopeSession): it carries the session's writes and what it was
// shown, to its next statement on any proxy.
func (v *viaProxy) keepToken(ctx context.Context, c *nodeConn, sess int) error {
	if v.e.cfg.TokenScope != TokenScopeSession {
		return nil
	}
	r, err := c.Execute(ctx, "SELECT @causal_token")
	if err != nil {
		return fmt.Errorf("lab: reading the session's token: %w", err)
	}
	text, err := r.GetString(0, 0)
	if err != nil {
		return fmt.Errorf("lab: reading the session's token: %w", err)
	}
	return v.keepTracked(sess, strings.Clone(text))
}

// keepTracked keeps text, the proxy's token after session sess's
// statement, for its next statement (TokenScopeSession).
func (v *viaProxy) keepTracked(sess int, text string) error {
	if strings.ContainsAny(text, "'\\") {
		return fmt.Errorf("lab: the proxy's token %q", text)
	}
	v.tokMu[sess].Lock()
	v.sessToks[sess] = text
	v.tokMu[sess].Unlock()
	return nil
}

// serialize holds session sess's statement under TokenScopeSession
// (viaProxy.serial); call the returned function after it.
func (v *viaProxy) serialize(sess int) func() {
	if v.e.cfg.TokenScope != TokenScopeSession {
		return func() {}
	}
	v.serial[sess].Lock()
	return v.serial[sess].Unlock
}

func (v *viaProxy) write(ctx context.Context, sess int, seq int64, hot int) (ack WriteAck, err error) {
	defer v.serialize(sess)()
	wctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	c, _, unlock, err := v.conn(wctx, sess)
	if err != nil {
		return ack, err
	}
	defer unlock()
	ack, err = v.e.cfg.Workload.Write(wctx, c, sess, seq, hot)
	v.fo.noteWrite(ack.GTID, err)
	if err != nil {
		return ack, err
	}
	if v.e.cfg.TokenScope == TokenScopeSession {
		if tok := c.trackedToken(); tok != "" {
			// The proxy's session tracking carried the token in the
			// write's OK packet (track_token): no round trip.
			if err := v.keepTracked(sess, tok); err != nil {
				return ack, err
			}
			v.trackedToks.Add(1)
		} else if err := v.keepToken(wctx, c, sess); err != nil {
			return ack, err
		}
		v.acked(sess, seq, hot, ack)
		return ack, nil
	}
	r, err := c.Execute(wctx, "SELECT @causal_token")
	var text string
	if err == nil {
		text, err = r.GetString(0, 0)
		text = strings.Clone(text)
	}
	if err != nil {
		return ack, fmt.Errorf("lab: reading the proxy's token: %w", err)
	}
	if _, err := c.Execute(wctx, "SET @causal_token = ''"); err != nil {
		return ack, fmt.Errorf("lab: clearing the proxy connection's token: %w", err)
	}
	v.acked(sess, seq, hot, ack)
	if text == "" {
		// The write stands (the ground truth judges later reads against
		// it) but no token protects it: counted, and reported.
		v.noToken.Add(1)
		return ack, nil
	}
	tok, err := gtid.ParseToken(text)
	if err != nil {
		return ack, fmt.Errorf("lab: the proxy's token %q: %w", text, err)
	}
	v.tokMu[sess].Lock()
	v.toks[sess] = v.toks[sess].Merge(tok)
	v.tokMu[sess].Unlock()
	return ack, nil
}

// acked records session sess's write seq (hot row hot) as acknowledged
// with ack: the ground truth judges later reads against it.
func (v *viaProxy) acked(sess int, seq int64, hot int, ack WriteAck) {
	ss := &v.e.sess[sess]
	ss.mu.Lock()
	ss.acked = seq
	ss.mu.Unlock()
	v.e.hot.ack(hot, ack.Hot)
	if gt, err := flavorOf(v.e.cfg.Engine).parseWrite(ack.GTID); err == nil {
		v.e.lag.ack(gt, time.Now()) // lag measurement only
	}
}

// annotated prefixes every statement with the session's annotations.
type annotated struct {
	c      *nodeConn
	prefix string
}

var _ Execer = annotated{}

func (a annotated) Execute(ctx context.Context, q string) (*mysql.Result, error) {
	return a.c.Execute(ctx, a.prefix+q)
}

func (a annotated) ExecuteWrite(ctx context.Context, q string) (*mysql.Result, string, error) {
	return a.c.ExecuteWrite(ctx, a.prefix+q)
}

func (v *viaProxy) read(ctx context.Context, sess int, out *Read) {
	v.e.hot.issue(&v.e.sess[sess], out)
	defer v.serialize(sess)()
	v.tokMu[sess].Lock()
	tok := v.toks[sess]
	v.tokMu[sess].Unlock()
	prefix := readAnnotation(v.sp.Policy, sess, tok)
	rctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	c, pi, unlock, err := v.conn(rctx, sess)
	if err != nil {
		out.Outcome, out.Done = router.OutError, v.e.since()
		return
	}
	v.routes.Delete(routeKey(pi, c.connID()))
	own, err := v.e.cfg.Workload.Read(rctx, annotated{c: c, prefix: prefix}, sess, out.Hot)
	if reason, _, ok := proxyRefusal(err); err == nil || (ok && reason == router.ReasonSeenLost.String()) {
		// After a declared loss too: the proxy dropped what the session
		// had seen, and the token it now gives says so.
		if kerr := v.keepToken(rctx, c, sess); err == nil {
			err = kerr
		}
	}
	if rt, ok := v.routes.LoadAndDelete(routeKey(pi, c.connID())); ok && err == nil {
		// The proxy reported the route before the answer left it, under
		// the id of the connection the read ran on: the one whose entry
		// was cleared above, or one the read dialled afresh (the
		// connection had broken: an id the proxy never gave before, so
		// only this read's route is there).
		r := rt.(proxy.ReadRoute)
		out.Node, out.Reason, out.HashReason = r.Node, r.Reason.String(), r.HashReason
	}
	// The proxy keeps the monotonic-reads watermark per connection: the
	// checker judges the read within this connection's scope (Read.Conn).
	// A session token carries it across connections and proxies: the
	// scope is then the whole session.
	out.Conn = scopeOf(pi, c.connID())
	if v.e.cfg.TokenScope == TokenScopeSession {
		out.Conn = 0
	}
	unlock()
	out.Done = v.e.since()
	if err == nil {
		out.Own, out.Outcome = own, router.OutProxied
		return
	}
	out.Outcome = router.OutError
	if reason, deferred, ok := proxyRefusal(err); ok {
		out.Reason = reason
		if reason == router.ReasonSeenLost.String() {
			// A declared loss: the proxy dropped the watermark of the
			// scope it keeps (the connection, which the lab's sessions
			// share; or the session's own token).
			out.ResetSeen = true
			out.ResetScope = v.e.cfg.TokenScope != TokenScopeSession
		}
		switch {
		case deferred:
			out.Outcome = router.OutDeferred
		case reason == router.ReasonTimedOut.String():
			out.Outcome = router.OutTimedOut
		default:
			out.Outcome = router.OutFailedFast
		}
	}
}

// proxyRefusal recognises the proxy's answer to a read the router refused
// ("causallab proxy: cannot serve this read consistently: <reason> (...)")
// or deferred ("causallab proxy: read deferred: <reason>; retry after ...",
// whatever its configured error code) and returns the router's reason.
func proxyRefusal(err error) (reason string, deferred, ok bool) {
	var me *mysql.MyError
	if !errors.As(err, &me) {
		return "", false, false
	}
	rest, ok := strings.CutPrefix(me.Message, "causallab proxy: cannot serve this read consistently: ")
	if !ok {
		if rest, ok = strings.CutPrefix(me.Message, "causallab proxy: read deferred: "); !ok {
			return "", false, false
		}
		reason, _, _ = strings.Cut(rest, ";")
		return reason, true, reason != ""
	}
	reason, _, _ = strings.Cut(rest, " ")
	return reason, false, reason != ""
}

// outcomes reads the proxy's own count of reads by outcome
// (causallab_router_reads_total on its /metrics), which the proxy's clients
// cannot see per read.
func (v *viaProxy) outcomes(ctx context.Context) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := map[string]float64{}
	for _, srv := range v.srvs {
		if err := proxyOutcomes(ctx, srv, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// proxyOutcomes adds srv's reads by outcome to out.
func proxyOutcomes(ctx context.Context, srv *proxy.Server, out map[string]float64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.HTTPAddr()+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("lab: the proxy's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "causallab_router_reads_total{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return fmt.Errorf("lab: the proxy's metrics: %q: %w", line, err)
		}
		for _, l := range strings.Split(labels, ",") {
			if o, ok := strings.CutPrefix(l, `outcome="`); ok {
				out[strings.TrimSuffix(o, `"`)] += n
			}
		}
	}
	return sc.Err()
}

// note is the result line with the proxy's own outcome counts.
func (v *viaProxy) note(ctx context.Context) string {
	m, err := v.outcomes(ctx)
	if err != nil {
		return fmt.Sprintf("%s via proxy: the proxy's outcome counts could not be read: %v", v.sp.Name, err)
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	tracked := ""
	if v.e.cfg.TokenScope == TokenScopeSession {
		tracked = fmt.Sprintf("; tokens taken from the write's OK packet: %d", v.trackedToks.Load())
	}
	return fmt.Sprintf("%s via proxy: the proxy counted its reads as %s (writes without a token: %d%s).", v.sp.Name, strings.Join(parts, ", "), v.noToken.Load(), tracked)
}

// failover tells the proxy of a promotion, as an orchestrator would
// (Server.Promote, what POST /admin/promote does; its discovery is off
// here so that every run follows at the same moment). Every write
// acknowledged after it by a server other than the new primary is an
// old primary's (old_primary_writes).
func (v *viaProxy) failover(ctx context.Context, fr compose.FailoverResult) error {
	for _, srv := range v.srvs {
		if _, err := srv.Promote(ctx, fr.NewPrimary, "admin"); err != nil {
			return fmt.Errorf("lab: %s via proxy: %w", v.sp.Name, err)
		}
	}
	at := time.Now()
	f := flavorOf(v.e.cfg.Engine)
	writer, err := writerOf(ctx, f, v.e.nodes.Primary())
	if err != nil {
		return fmt.Errorf("lab: %s via proxy: the new primary's writer source: %w", v.sp.Name, err)
	}
	v.fo.promoted(f, writer, at)
	return nil
}

// writerOf reads the source node n's own writes have under f's writeID
// (MySQL: its server_uuid; MariaDB: its domain and server id).
func writerOf(ctx context.Context, f serverFlavor, n compose.Node) (gtid.SID, error) {
	c, err := dialNodeAs(ctx, f, n.Addr(), n.User, n.Password)
	if err != nil {
		return gtid.SID{}, err
	}
	defer c.Close()
	r, err := c.Execute(ctx, f.writerQuery())
	if err != nil {
		return gtid.SID{}, err
	}
	s, err := r.GetString(0, 0)
	if err != nil {
		return gtid.SID{}, err
	}
	return f.parseWriter(s)
}

// promoted starts following the writes after a promotion to the primary
// whose writes have source cur under fl's writeID, told at at.
func (f *proxyFailover) promoted(fl serverFlavor, cur gtid.SID, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current, f.flavor = cur, fl
	f.promotedAt, f.resumed = at, false
	f.promotions++
}

// noteWrite counts a write's outcome after a promotion: its GTID g (""
// when it failed with err).
func (f *proxyFailover) noteWrite(g string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.promotions == 0 {
		return
	}
	if err != nil {
		f.failedWrites++
		return
	}
	if gt, perr := f.flavor.writeID(g); perr == nil && gt.SID != f.current {
		f.oldPrimaryWrites++
		return
	}
	if !f.resumed {
		f.resumed, f.resume = true, time.Since(f.promotedAt)
	}
}

// result is the proxy's promotions as the run's result reports them (nil
// when none).
func (f *proxyFailover) result() *PromotionResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.promotions == 0 {
		return nil
	}
	r := &PromotionResult{Promotions: f.promotions, FailedWrites: f.failedWrites, OldPrimaryWrites: f.oldPrimaryWrites}
	if f.resumed {
		ms := ms(f.resume)
		r.ResumeMs = &ms
	}
	return r
}

// failoverNote is the result line of the proxy's failovers ("" when none).
func (v *viaProxy) failoverNote() string {
	f := &v.fo
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.promotions == 0 {
		return ""
	}
	resume := "no write was acknowledged after it"
	if f.resumed {
		resume = fmt.Sprintf("the first write was acknowledged %d ms after the proxy was told (resume_ms)", f.resume.Milliseconds())
	}
	return fmt.Sprintf("%s via proxy: %d promotion(s) followed; %s; %d writes failed after it, %d were acknowledged by an old primary (old_primary_writes).",
		v.sp.Name, f.promotions, resume, f.failedWrites, f.oldPrimaryWrites)
}

// drift starts (d > 0) or stops (d < 0) d outside readers on the named
// replica, through the proxy's router (drifter).
func (v *viaProxy) drift(name string, d int) { v.drifts.drift(name, d) }

// close stops the proxies and closes the lab's connections to them.
func (v *viaProxy) close() {
	v.drifts.close()
	for w := range v.conns {
		for i := range v.conns[w] {
			pc := &v.conns[w][i]
			pc.mu.Lock()
			if pc.c != nil {
				pc.c.Close()
				pc.c = nil
			}
			pc.mu.Unlock()
		}
	}
	v.cancel()
	for range v.srvs {
		<-v.done
	}
}
