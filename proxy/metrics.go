package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/internal/promcache"
)

// metrics are the proxy's Prometheus series, registered on the Server's own
// registry (no package globals).
type metrics struct {
	reg *prometheus.Registry
	// connections counts client connections by outcome (accepted,
	// auth-failed, closed).
	connections *prometheus.CounterVec
	// active is the number of open client sessions.
	active prometheus.Gauge
	// statements counts statements by kind and the backend role that ran
	// them (primary, replica, proxy).
	statements *prometheus.CounterVec
	// primaryReasons counts statements pinned to the primary, by reason
	// (classifier reasons plus session pins, live.Pin: in-transaction,
	// autocommit-off, temp-table-session, locked-tables, user-variables,
	// no-replicas).
	primaryReasons *prometheus.CounterVec
	// The router's series (causallab_router_reads_total,
	// freshness_fallbacks_total, reads_waited_total, wait_seconds,
	// decisions_total, ...) are registered on reg by live.New: the proxy's
	// reads are counted by the router's own code.
	// clientErrors counts errors the proxy itself returned, by kind
	// (bad-token, route-<router reason>, backend-lost, packet-too-large,
	// ...).
	clientErrors *prometheus.CounterVec
	// serverErrors counts routed reads the serving node answered with an
	// ERR packet (a syntax error, an unknown table: the statement's
	// outcome, relayed to the client), by the router's outcome (replica,
	// primary, fallback, stale). The router counts such a read where it
	// was served, not as outcome "error".
	serverErrors *prometheus.CounterVec
	// idleClosed counts backend connections the server closed while the
	// session left them idle (wait_timeout), found before a command was
	// sent, by backend and what the proxy did: reconnected (the session's
	// state replayed) or client-closed (state a new connection cannot
	// restore: the client got 4031 and its connection closed).
	idleClosed *prometheus.CounterVec
	// backendErrors counts backend connection failures by backend and op.
	backendErrors *prometheus.CounterVec
	// replayFailures counts session replays that failed on a backend.
	replayFailures *prometheus.CounterVec
	// watermarkFallbacks counts replica reads whose watermark was taken
	// from another source (session.watermarkFromPrimary), by source.
	watermarkFallbacks *prometheus.CounterVec
	// primaryClassicEOF counts primary connections dialled without
	// CLIENT_DEPRECATE_EOF, which their server did not offer
	// (dialBackend): a statement there that writes and returns rows does
	// not add its GTID to the session's token.
	primaryClassicEOF prometheus.Counter
	// promotions counts promotions followed (failover.go) by cause
	// (admin, discovered); epoch is the current topology epoch;
	// discoveries counts discovery rounds that found a promotion they
	// did not follow (ambiguous, promotion-failed); adminRequests counts
	// admin API calls by endpoint and result.
	promotions    *prometheus.CounterVec
	epoch         prometheus.Gauge
	discoveries   *prometheus.CounterVec
	adminRequests *prometheus.CounterVec
	// watermarkReads counts the watermark readers' work (wmReader) by
	// node and result.
	watermarkReads *prometheus.CounterVec
	// executes counts prepared-statement executions by path: raw (the
	// client's packet and the binary result relayed unchanged) is the one
	// path; the path and reason labels stay for dashboards built on them.
	executes *prometheus.CounterVec
	// sessionState counts session state handled beyond a replay, by
	// event (seteval.go, session.dropReplicaState).
	sessionState *prometheus.CounterVec
	// executesRaw is executes{path="raw",reason=""}, resolved once.
	executesRaw prometheus.Counter
	// procsChanges counts the changes gomaxprocs: adaptive made, by
	// direction (grow, shrink); Server.adaptProcs.
	procsChanges *prometheus.CounterVec
	// ready is 1 once the proxy serves (Server.awaitReady); startupUnread
	// counts, by backend, those whose position was not read when
	// startup_timeout passed.
	ready prometheus.Gauge
	// handshakes is the number of client connections still in their
	// login (max_handshakes).
	handshakes    prometheus.Gauge
	startupUnread *prometheus.CounterVec
	// statementsBy resolves statements' children once (statement).
	statementsBy *promcache.Counters
	// kills counts KILL statements the proxy carried out or refused, by
	// kind (query, connection) and outcome (killed, idle, unknown-thread,
	// denied, not-literal): session_admin.go.
	kills *prometheus.CounterVec
	// killResends counts kills re-sent to a statement still in flight.
	killResends prometheus.Counter
}

// The roles of the statements counter (its role label).
const (
	rolePrimary = "primary"
	roleReplica = "replica"
	roleProxy   = "proxy"
)

// numKinds is the number of statement kinds (Kind), for statement's
// cached children.
const numKinds = int(KindKill) + 1

// statement is statements_total{kind,role}'s child for a statement of
// kind k (prefixed "execute-" when execute: a prepared statement's
// execution) run by role.
func (m *metrics) statement(execute bool, k Kind, role string) prometheus.Counter {
	r := 0
	switch role {
	case rolePrimary:
	case roleReplica:
		r = 1
	case roleProxy:
		r = 2
	default:
		r = -1
	}
	kind := k.String()
	if r < 0 || int(k) >= numKinds {
		if execute {
			kind = "execute-" + kind
		}
		return m.statements.WithLabelValues(kind, role)
	}
	i := int(k)*3 + r
	if execute {
		kind, i = executeKinds[k], i+numKinds*3
	}
	return m.statementsBy.Get(i, kind, role)
}

// executeKinds are the execute- kind labels, by Kind.
var executeKinds = func() []string {
	ks := make([]string, numKinds)
	for k := range numKinds {
		ks[k] = "execute-" + Kind(k).String()
	}
	return ks
}()

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_connections_total", Help: "Client connections by outcome."}, []string{"outcome"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "causallab_proxy_sessions", Help: "Open client sessions."}),
		statements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_statements_total", Help: "Statements by kind and the role that ran them."}, []string{"kind", "role"}),
		primaryReasons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_primary_statements_total", Help: "Statements kept on the primary, by reason."}, []string{"reason"}),
		clientErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_client_errors_total", Help: "Errors the proxy returned to clients, by kind."}, []string{"kind"}),
		serverErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_read_server_errors_total", Help: "Routed reads the serving node answered with an error packet, by the router's outcome."}, []string{"outcome"}),
		idleClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_idle_closed_total", Help: "Backend connections closed by the server while idle, by backend and what the proxy did (reconnected, resent: a replica read sent again after the close raced the check, client-closed)."}, []string{"backend", "outcome"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_backend_errors_total", Help: "Backend failures by backend and operation."}, []string{"backend", "op"}),
		replayFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_replay_failures_total", Help: "Session replays that failed, by backend."}, []string{"backend"}),
		watermarkFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_watermark_fallbacks_total", Help: "Replica reads whose watermark could not be read after the result reached the client and was taken from another source instead, by source (primary: its executed set read afterwards; replica-query: under watermark_source all-gtids, the final OK carried no usable set and the replica's executed set was read with a query afterwards; primary-no-log-status: a read served by the primary whose watermark was read with gtid_executed because the server refused performance_schema.log_status to the proxy's account; mariadb-unlogged: a watermark batch on a MariaDB node that does not write what it applies to its binary log, read from gtid_current_pos alone)."}, []string{"source"}),
		sessionState: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_session_state_total", Help: "Session state the proxy handled beyond replaying a statement, by event (set-evaluated: a SET with an expression ran once on the primary and its values were read back and replayed as literals; set-not-evaluated: that read-back failed, the session's reads stay on the primary; replica-state-dropped: a routed read changed session state on a replica (a stored function), the connection was reset or closed and the change dropped; schema-dropped: a DROP DATABASE dropped the session's current schema, which the proxy forgot; schema-check-failed: reading the current schema after a DROP DATABASE failed, the proxy kept it; insert-id-lost: multiplexed, the session's LAST_INSERT_ID() could not be read from the connection it gave back or set on the next, a later LAST_INSERT_ID() answers as on a new connection)."}, []string{"event"}),
		primaryClassicEOF: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "causallab_proxy_primary_classic_eof_total", Help: "Primary connections dialled without CLIENT_DEPRECATE_EOF because the server did not offer it (no MySQL since 5.7.5): a statement there that writes and returns rows (ANALYZE TABLE, a CALL that writes and selects) does not add its GTID to the session's token."}),
		watermarkReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_watermark_reads_total", Help: "The watermark reads made after a read on a connection of the proxy's own account, never the session's (every read the primary served; a replica's reads under watermark_source query, and all-gtids reads whose OK carried no set), each shared by the sessions waiting at once, by node and result (query: queries run; served: watermarks handed to sessions; error: queries that failed)."}, []string{"node", "result"}),
		executes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_stmt_executes_total", Help: "Prepared-statement executions by path (raw: the client's packet and the binary result relayed unchanged; the only path)."}, []string{"path", "reason"}),
	}
	m.executesRaw = m.executes.WithLabelValues("raw", "")
	m.statementsBy = promcache.New(m.statements, 2*numKinds*3)
	m.reg.MustRegister(m.connections, m.active, m.statements, m.primaryReasons,
		m.clientErrors, m.serverErrors, m.idleClosed, m.backendErrors, m.replayFailures, m.watermarkFallbacks, m.executes, m.sessionState, m.primaryClassicEOF, m.watermarkReads,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	m.ready = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "causallab_proxy_ready", Help: "1 once the proxy serves: every backend's position read once, or startup_timeout passed."})
	m.startupUnread = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_startup_unread_total", Help: "Backends whose position was not read when startup_timeout passed (the proxy then served without it)."}, []string{"backend"})
	m.procsChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_gomaxprocs_changes_total", Help: "Changes gomaxprocs: adaptive made to GOMAXPROCS, by direction (grow: client commands overlapped, to Go's default; shrink: they stopped, to one); the current value is go_sched_gomaxprocs_threads."}, []string{"direction"})
	m.handshakes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "causallab_proxy_handshakes", Help: "Client connections still in their login (greeting, TLS, authentication), bounded by max_handshakes."})
	m.kills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_kills_total", Help: "KILL statements the proxy answered on its own sessions, by kind (query, connection) and outcome (killed: a statement in flight was killed or the connection ended; idle: nothing was running; unknown-thread: 1094; denied: 1095; not-literal: the id was not a literal, refused)."}, []string{"kind", "outcome"})
	m.killResends = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "causallab_proxy_kill_resends_total", Help: "KILL QUERY re-sent to a statement still in flight after the last one (it may have reached the server before the statement)."})
	m.promotions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_promotions_total", Help: "Promotions the proxy followed (a replica became the primary of a new epoch), by cause (admin: POST /admin/promote; discovered: discover roles)."}, []string{"cause"})
	m.epoch = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "causallab_proxy_epoch", Help: "The topology epoch the proxy routes in (raised by each promotion)."})
	m.discoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_discovery_unfollowed_total", Help: "Discovery rounds that found the primary read-only or down and did not follow a promotion, by result (ambiguous: several writable replicas without a source; promotion-failed)."}, []string{"result"})
	m.adminRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_admin_requests_total", Help: "Admin API calls by endpoint and result (ok, refused, unauthorized)."}, []string{"endpoint", "result"})
	m.reg.MustRegister(m.promotions, m.epoch, m.discoveries, m.adminRequests)
	m.reg.MustRegister(m.ready, m.startupUnread, m.procsChanges, m.handshakes, m.kills, m.killResends)
	return m
}
