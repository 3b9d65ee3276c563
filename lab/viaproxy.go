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
	sp     RouterSpec
	e      *engine
	srv    *proxy.Server
	cancel context.CancelFunc
	done   chan error

	conns []proxyConn
	tokMu []sync.Mutex // per session, guards tokens[i]
	toks  []gtid.Token
	// noToken counts writes after which the proxy returned no token.
	noToken atomic.Int64
	// routes holds the proxy's report of each connection's last routed
	// read (proxy.Config.OnRead), by the connection id the proxy gave.
	routes sync.Map // uint32 -> proxy.ReadRoute
	// drifts is the drift events' outside load through the proxy's router.
	drifts *drifter[gtid.Set]
}

type proxyConn struct {
	mu sync.Mutex
	c  *nodeConn
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

func newViaProxy(ctx context.Context, sp RouterSpec, e *engine, src live.PositionSource[gtid.Set]) (*viaProxy, error) {
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
	v := &viaProxy{sp: sp, e: e, done: make(chan error, 1),
		conns: make([]proxyConn, e.cfg.Workers), tokMu: make([]sync.Mutex, e.cfg.Sessions), toks: make([]gtid.Token, e.cfg.Sessions)}
	cfg := proxy.Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Users: []proxy.User{{Name: p.User, Password: p.Password}},
		AuthMethod: mysql.AUTH_NATIVE_PASSWORD, Primary: backend(p.Name, p.Addr()), Policy: name,
		WaitBudget: sp.Policy.WaitBudget, FallbackPerSecond: sp.Cap.PerSecond, Epoch: max(e.nodes.Epoch(), 1),
		Source: src, Logger: e.cfg.Logger, HashMode: sp.Policy.HashMode.String(), GlobalSource: e.cfg.GlobalSource.String(),
		OnRead: func(r proxy.ReadRoute) { v.routes.Store(r.Conn, r) }}
	if src == nil {
		// Config.Positions: the proxy's own pollers (`positions: poll`).
		cfg.Positions, cfg.PollInterval = string(PositionsPoll), e.cfg.PollInterval
	}
	cfg.WatermarkSource = string(e.cfg.WatermarkSource)
	var names []string
	for i, r := range e.nodes.Replicas() {
		b := backend(r.Name, r.Addr())
		b.Weight = weightOf(e.cfg.Weights, i)
		cfg.Replicas = append(cfg.Replicas, b)
		names = append(names, r.Name)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("lab: router %s via proxy: %w", sp.Name, err)
	}
	if err := srv.Listen(ctx); err != nil {
		return nil, fmt.Errorf("lab: router %s via proxy: %w", sp.Name, err)
	}
	table, err := hashTable(names, e.cfg.Weights)
	if err != nil {
		return nil, fmt.Errorf("lab: router %s via proxy: %w", sp.Name, err)
	}
	pctx, cancel := context.WithCancel(ctx)
	v.srv, v.cancel = srv, cancel
	v.drifts = newDrifter(pctx, srv.Router(), table, names)
	go func() { v.done <- srv.Serve(pctx) }()
	return v, nil
}

func (v *viaProxy) spec() *RouterSpec { return &v.sp }

// conn returns session sess's proxy connection, locked; call unlock after.
func (v *viaProxy) conn(ctx context.Context, sess int) (*nodeConn, func(), error) {
	pc := &v.conns[sess%len(v.conns)]
	pc.mu.Lock()
	if pc.c == nil {
		p := v.e.nodes.Primary()
		c, err := dialNode(ctx, v.srv.Addr(), p.User, p.Password)
		if err != nil {
			pc.mu.Unlock()
			return nil, nil, err
		}
		pc.c = c
	}
	return pc.c, pc.mu.Unlock, nil
}

func (v *viaProxy) write(ctx context.Context, sess int, seq int64, hot int) error {
	wctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	c, unlock, err := v.conn(wctx, sess)
	if err != nil {
		return err
	}
	defer unlock()
	ack, err := v.e.cfg.Workload.Write(wctx, c, sess, seq, hot)
	if err != nil {
		return err
	}
	g := ack.GTID
	r, err := c.Execute(wctx, "SELECT @causal_token")
	var text string
	if err == nil {
		text, err = r.GetString(0, 0)
		text = strings.Clone(text)
	}
	if err != nil {
		return fmt.Errorf("lab: reading the proxy's token: %w", err)
	}
	if _, err := c.Execute(wctx, "SET @causal_token = ''"); err != nil {
		return fmt.Errorf("lab: clearing the proxy connection's token: %w", err)
	}
	ss := &v.e.sess[sess]
	ss.mu.Lock()
	ss.acked = seq
	ss.mu.Unlock()
	v.e.hot.ack(hot, ack.Hot)
	if text == "" {
		// The write stands (the ground truth judges later reads against
		// it) but no token protects it: counted, and reported.
		v.noToken.Add(1)
		return nil
	}
	tok, err := gtid.ParseToken(text)
	if err != nil {
		return fmt.Errorf("lab: the proxy's token %q: %w", text, err)
	}
	v.tokMu[sess].Lock()
	v.toks[sess] = v.toks[sess].Merge(tok)
	v.tokMu[sess].Unlock()
	if gt, perr := gtid.ParseGTID(g); g != "" && perr == nil {
		v.e.lag.ack(gt, time.Now()) // lag measurement only
	}
	return nil
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
	v.tokMu[sess].Lock()
	tok := v.toks[sess]
	v.tokMu[sess].Unlock()
	prefix := readAnnotation(v.sp.Policy, sess, tok)
	rctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	c, unlock, err := v.conn(rctx, sess)
	if err != nil {
		out.Outcome, out.Done = router.OutError, v.e.since()
		return
	}
	v.routes.Delete(c.connID())
	own, err := v.e.cfg.Workload.Read(rctx, annotated{c: c, prefix: prefix}, sess, out.Hot)
	if rt, ok := v.routes.LoadAndDelete(c.connID()); ok && err == nil {
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
	out.Conn = c.connID()
	unlock()
	out.Done = v.e.since()
	if err == nil {
		out.Own, out.Outcome = own, router.OutProxied
		return
	}
	out.Outcome = router.OutError
	if reason, deferred, ok := proxyRefusal(err); ok {
		out.Reason = reason
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+v.srv.HTTPAddr()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lab: the proxy's metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
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
			return nil, fmt.Errorf("lab: the proxy's metrics: %q: %w", line, err)
		}
		for _, l := range strings.Split(labels, ",") {
			if o, ok := strings.CutPrefix(l, `outcome="`); ok {
				out[strings.TrimSuffix(o, `"`)] += n
			}
		}
	}
	return out, sc.Err()
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
	return fmt.Sprintf("%s via proxy: the proxy counted its reads as %s (writes without a token: %d).", v.sp.Name, strings.Join(parts, ", "), v.noToken.Load())
}

// drift starts (d > 0) or stops (d < 0) d outside readers on the named
// replica, through the proxy's router (drifter).
func (v *viaProxy) drift(name string, d int) { v.drifts.drift(name, d) }

// close stops the proxy and closes the lab's connections to it.
func (v *viaProxy) close() {
	v.drifts.close()
	for i := range v.conns {
		pc := &v.conns[i]
		pc.mu.Lock()
		if pc.c != nil {
			pc.c.Close()
			pc.c = nil
		}
		pc.mu.Unlock()
	}
	v.cancel()
	<-v.done
}
