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
	// ServerUUID is @@server_uuid ("" when unreachable).
	ServerUUID string `json:"server_uuid"`
	// GTIDExecuted is @@gtid_executed in MySQL's GTID-set text form.
	GTIDExecuted string `json:"gtid_executed"`
	// ReadOnly is @@super_read_only.
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
	// RetrievedGTIDs is Retrieved_Gtid_Set (replicas).
	RetrievedGTIDs string `json:"retrieved_gtids,omitempty"`
	// PendingRepoint says why a failover could not repoint this replica
	// ("paused", "down", or an error); Resume, Restart or Heal repoints
	// it. Empty when nothing is pending.
	PendingRepoint string `json:"pending_repoint,omitempty"`
	// Health is the verdict.
	Health Health `json:"health"`
}

// replicaStatus holds the columns of SHOW REPLICA STATUS compose uses.
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
		case "Replica_IO_Running":
			st.IORunning = v
		case "Replica_SQL_Running":
			st.SQLRunning = v
		case "Last_IO_Error":
			st.LastIOError = v
		case "Last_SQL_Error":
			st.LastSQLError = v
		case "Source_Host":
			st.SourceHost = v
		case "Source_Port":
			st.SourcePort, _ = strconv.Atoi(v)
		case "Seconds_Behind_Source":
			if vals[i].Valid {
				st.Behind, _ = strconv.Atoi(v)
			}
		case "SQL_Delay":
			st.Delay, _ = strconv.Atoi(v)
		case "Retrieved_Gtid_Set":
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
	db, err := t.db(n)
	if err == nil {
		var ro int
		err = db.QueryRowContext(ctx, "SELECT @@server_uuid, @@gtid_executed, @@super_read_only").Scan(&ns.ServerUUID, &ns.GTIDExecuted, &ro)
		ns.ReadOnly = ro == 1
	}
	if err != nil {
		ns.Health = HealthUnreachable
		ns.LastError = err.Error()
		return ns
	}
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		ns.Health = HealthUnreachable
		ns.LastError = err.Error()
		return ns
	}
	ns.Health = HealthOK
	if st.configured {
		ns.IORunning, ns.SQLRunning = st.IORunning, st.SQLRunning
		ns.Source = fmt.Sprintf("%s:%d", st.SourceHost, st.SourcePort)
		ns.SecondsBehind = st.Behind
		ns.SourceDelay = st.Delay
		ns.RetrievedGTIDs = st.Retrieved
		ns.LastError = st.LastIOError
		if st.LastSQLError != "" {
			ns.LastError = st.LastSQLError
		}
	}
	if n.Role != RoleReplica {
		return ns
	}
	switch {
	case !st.configured || ns.LastError != "":
		ns.Health = HealthBroken
	case st.IORunning != "Yes" || st.SQLRunning != "Yes":
		ns.Health = HealthStopped
	case st.Behind >= LagThreshold:
		// Seconds_Behind_Source reads 1 for a moment after a replica has
		// applied everything; lagging means there is also something
		// received but not applied.
		var applied int
		db, _ := t.db(n)
		err := db.QueryRowContext(ctx, "SELECT GTID_SUBSET(?, ?)", st.Retrieved, st.Executed).Scan(&applied)
		if err != nil || applied == 0 {
			ns.Health = HealthLagging
		}
	}
	return ns
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
