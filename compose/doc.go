// Package compose starts, inspects, breaks and tears down a real MySQL
// replication topology: one primary and 0..9 replicas wired with GTID
// auto-position.
//
// # Starting a topology
//
//	topo, err := compose.Start(ctx, compose.Config{Replicas: 2, Backend: compose.BackendLocal})
//	if err != nil { ... }
//	defer topo.Down(ctx)
//	p := topo.Primary()        // Node{Name: "primary", Role: RolePrimary, Host, Port, User, Password}
//	db, _ := sql.Open("mysql", p.DSN()) // user:password@tcp(127.0.0.1:port)/
//	for _, r := range topo.Replicas() { _ = r.Addr() } // "127.0.0.1:port"
//	r1, err := topo.Node("replica1")
//
// Node names are stable identities: "primary", "replica1".."replica9". After
// Failover("replica2") the node named "replica2" has RolePrimary, the old
// primary has RoleRetired, and Primary()/Replicas() follow the roles. Take
// Node values again after a failover; their addresses never change.
//
// Every server gets the account Config.User/Config.Password (default
// causallab/causallab, all privileges with grant option, replication
// included), created with sql_log_bin=0 before replication is wired, so
// every server starts with an empty gtid_executed. Replicas run with
// super_read_only=ON (persisted).
//
// # Backends
//
//   - BackendLocal (the default): mysqld processes chrooted into the MySQL
//     root filesystem built by `causallab image` (scripts/ensure-mysql.sh),
//     or the mysqld on PATH with Config.HostMysqld. Each topology lives in
//     its own temporary directory (ROOTFS/tmp/causallab-*) and listens on
//     free 127.0.0.1 ports picked at start, so topologies run side by side.
//     Down, a failed Start, and composetest's cleanup kill every process
//     and remove the directory; if the owning process dies, mysqld dies
//     with it (parent-death signal) and the next Start sweeps the directory.
//   - BackendDocker: one container per server on a user-defined network,
//     started with testcontainers-go (set TESTCONTAINERS_RYUK_DISABLED=true).
//   - BackendExternal: attach to servers given by DSNs; only SQL-level
//     faults work, the others return ErrNotSupported.
//
// # Status and faults
//
// Status reports per node role, server_uuid, gtid_executed, IO/SQL thread
// state, last error, seconds behind source and a Health verdict. Faults:
// Kill, Restart, Pause, Resume, StopApplier, StartApplier, SetApplyDelay,
// Partition, Heal, HeavyTransaction, Failover (which returns the GTIDs lost,
// computed with GTID_SUBTRACT, and the new epoch). Every fallback a fault
// takes is explicit in its result and counted in Stats.
//
// # Tests
//
// Package composetest wraps Start for tests: composetest.Start(tb, cfg)
// cleans up with tb.Cleanup, composetest.Main(m, cfg, run) shares one
// topology across a package from TestMain. The environment variable
// CAUSALLAB_TEST_BACKEND (local, docker) overrides the backend.
package compose
