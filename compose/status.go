package compose

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Health is a node's health verdict.
type Health string

const (
	// HealthOK: the server answers; a replica's threads run without errors
	// and it is less than LagThreshold behind.
	HealthOK Health = "ok"
	// HealthLagging: a replica whose threads run, which is LagThreshold or
	// more behind its source and has received transactions it has not
	// applied yet.
	HealthLagging Health = "lagging"
	// HealthStopped: a replica with a replication thread stopped and no
	// error (StopApplier, Partition on the local backend, ...).
	HealthStopped Health = "stopped"
	// HealthBroken: a replica whose replication thread reports an error, or
	// a replica that is not configured to replicate.
	HealthBroken Health = "broken"
	// HealthUnreachable: the server does not answer SQL (dead, paused,
	// partitioned).
	HealthUnreachable Health = "unreachable"
)

// LagThreshold is the Seconds_Behind_Source from which a replica is lagging.
const LagThreshold = 1

// NodeStatus is what Status reports about one node.
type NodeStatus struct {
	Node Node `json:"node"`
	// ServerUUID is @@server_uuid ("" when unreachable; MariaDB and
	// PostgreSQL have none).
	ServerUUID string `json:"server_uuid"`
	// GTIDExecuted is @@gtid_executed in MySQL's GTID-set text form
	// (MariaDB: @@gtid_current_pos; PostgreSQL: empty).
	GTIDExecuted string `json:"gtid_executed"`
	// Position is what the node has applied, in its engine's text: MySQL
	// @@gtid_executed, MariaDB @@gtid_current_pos, PostgreSQL
	// "<timeline>:<LSN>" (a primary's pg_current_wal_lsn(), a standby's
	// pg_last_wal_replay_lsn()).
	Position string `json:"position,omitempty"`
	// ReadOnly is @@super_read_only (MariaDB @@read_only; PostgreSQL: in
	// recovery, or default_transaction_read_only).
	ReadOnly bool `json:"read_only"`
	// IORunning and SQLRunning are Replica_IO_Running and
	// Replica_SQL_Running ("Yes", "No", "Connecting"); empty for a
	// server that is not a replica.
	IORunning  string `json:"io_running,omitempty"`
	SQLRunning string `json:"sql_running,omitempty"`
	// Source is the source host:port the replica replicates from.
	Source string `json:"source,omitempty"`
	// LastError is the last IO or SQL thread error ("" if none), or why the
	// node is unreachable.
	LastError string `json:"last_error,omitempty"`
	// SecondsBehind is Seconds_Behind_Source; -1 when NULL or not a replica.
	SecondsBehind int `json:"seconds_behind"`
	// SourceDelay is the configured SOURCE_DELAY in seconds.
	SourceDelay int `json:"source_delay,omitempty"`
	// RetrievedGTIDs is Retrieved_Gtid_Set (replicas; MariaDB:
	// Gtid_IO_Pos; PostgreSQL: pg_last_wal_receive_lsn()).
	RetrievedGTIDs string `json:"retrieved_gtids,omitempty"`
	// SourceDelayMS is the configured apply delay in milliseconds
	// (PostgreSQL's recovery_min_apply_delay; SourceDelay*1000 elsewhere).
	SourceDelayMS int64 `json:"source_delay_ms,omitempty"`
	// LagBytes is a PostgreSQL standby's received-but-not-replayed WAL.
	LagBytes int64 `json:"lag_bytes,omitempty"`
	// PendingRepoint says why a failover could not repoint this replica
	// ("paused", "down", or an error); Resume, Restart or Heal repoints
	// it. Empty when nothing is pending.
	PendingRepoint string `json:"pending_repoint,omitempty"`
	// Health is the verdict.
	Health Health `json:"health"`
}

// replicaStatus holds the columns of SHOW REPLICA STATUS compose uses
// (MySQL's names; MariaDB's Slave_*/Master_* columns map to the same
// fields, its Gtid_IO_Pos to Retrieved).
type replicaStatus struct {
	configured   bool
	IORunning    string
	SQLRunning   string
	LastIOError  string
	LastSQLError string
	SourceHost   string
	SourcePort   int
	Behind       int // -1 for NULL
	Delay        int
	Retrieved    string
	Executed     string
}

func (t *Topology) replicaStatus(ctx context.Context, n Node) (replicaStatus, error) {
	db, err := t.db(n)
	if err != nil {
		return replicaStatus{}, err
	}
	rows, err := db.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		return replicaStatus{}, fmt.Errorf("compose: SHOW REPLICA STATUS on %s: %w", n.Name, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return replicaStatus{}, err
	}
	st := replicaStatus{Behind: -1}
	if !rows.Next() {
		return st, rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return replicaStatus{}, fmt.Errorf("compose: SHOW REPLICA STATUS on %s: %w", n.Name, err)
	}
	st.configured = true
	for i, c := range cols {
		v := vals[i].String
		switch c {
		case "Replica_IO_Running", "Slave_IO_Running":
			st.IORunning = v
		case "Replica_SQL_Running", "Slave_SQL_Running":
			st.SQLRunning = v
		case "Last_IO_Error":
			st.LastIOError = v
		case "Last_SQL_Error":
			st.LastSQLError = v
		case "Source_Host", "Master_Host":
			st.SourceHost = v
		case "Source_Port", "Master_Port":
			st.SourcePort, _ = strconv.Atoi(v)
		case "Seconds_Behind_Source", "Seconds_Behind_Master":
			if vals[i].Valid {
				st.Behind, _ = strconv.Atoi(v)
			}
		case "SQL_Delay":
			st.Delay, _ = strconv.Atoi(v)
		case "Retrieved_Gtid_Set", "Gtid_IO_Pos":
			st.Retrieved = v
		case "Executed_Gtid_Set":
			st.Executed = v
		}
	}
	return st, rows.Err()
}

// NodeStatus inspects one node. An unreachable node is not an error: it is
// reported with HealthUnreachable. Each node gets at most 3 s.
func (t *Topology) NodeStatus(ctx context.Context, name string) (NodeStatus, error) {
	n, err := t.Node(name)
	if err != nil {
		return NodeStatus{}, err
	}
	return t.nodeStatus(ctx, n), nil
}

func (t *Topology) nodeStatus(ctx context.Context, n Node) NodeStatus {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ns := NodeStatus{Node: n, SecondsBehind: -1}
	t.mu.Lock()
	ns.PendingRepoint = t.pending[n.Name]
	t.mu.Unlock()
	t.eng.status(ctx, t, &ns)
	return ns
}

// fromReplicaStatus fills ns from SHOW REPLICA STATUS (MySQL, MariaDB) and
// gives the verdict: ok, or for a replica broken, stopped or lagging
// (Seconds_Behind_Source at LagThreshold or more; the engine may clear
// that when nothing received is left unapplied).
func (ns *NodeStatus) fromReplicaStatus(st replicaStatus) {
	ns.Health = HealthOK
	if st.configured {
		ns.IORunning, ns.SQLRunning = st.IORunning, st.SQLRunning
		ns.Source = fmt.Sprintf("%s:%d", st.SourceHost, st.SourcePort)
		ns.SecondsBehind = st.Behind
		ns.SourceDelay = st.Delay
		ns.SourceDelayMS = int64(st.Delay) * 1000
		ns.RetrievedGTIDs = st.Retrieved
		ns.LastError = st.LastIOError
		if st.LastSQLError != "" {
			ns.LastError = st.LastSQLError
		}
	}
	if ns.Node.Role != RoleReplica {
		return
	}
	switch {
	case !st.configured || ns.LastError != "":
		ns.Health = HealthBroken
	case st.IORunning != "Yes" || st.SQLRunning != "Yes":
		ns.Health = HealthStopped
	case st.Behind >= LagThreshold:
		ns.Health = HealthLagging
	}
}

// Status inspects every node in parallel, in Nodes() order.
func (t *Topology) Status(ctx context.Context) []NodeStatus {
	nodes := t.Nodes()
	out := make([]NodeStatus, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i] = t.nodeStatus(ctx, n) })
	}
	wg.Wait()
	return out
}
