// Package walwatch keeps, for every streaming standby of a PostgreSQL
// primary, a live lower bound of the standby's replay position, read from
// the walsender's feedback on the primary: one query of
// pg_stat_replication per tick (the walsender's replication slot, or its
// application_name, names the standby; replay_lsn, reply_time and the
// walsender's pid and backend_start come with it), instead of one query
// per standby.
//
// One goroutine (Run) owns the mutable state (a tracker: pure, no I/O).
// Every change is published as an immutable Snapshot through an atomic
// pointer swap, so readers (the router) never take a lock; WaitFor blocks,
// with a context, until a standby's published replay LSN reaches a token.
//
// # Invariants
//
//   - The published replay LSN of a standby is what the standby itself
//     reported in its last status reply (GetXLogReplayRecPtr on the standby
//     when it sent the reply): never ahead of what the standby has
//     replayed, and a hot standby exposes a commit to queries before its
//     replay position passes the commit record.
//   - Within one walsender session (pid + backend_start) replay_lsn only
//     moves forward: the standby's replay pointer is monotone while its
//     startup process runs. The tracker checks it: a decrease is counted
//     (regressions, cause "session") and the lower value published, which
//     stays a lower bound.
//   - A new session (the standby reconnected or restarted) starts afresh:
//     its replay_lsn is published as it is, even when lower than the last
//     session's (a restarted standby replays again from its last restart
//     point and may expose less than before its crash); counted as a
//     reconnect, and as a regression (cause "reconnect") when lower.
//   - A standby missing from pg_stat_replication is unhealthy
//     (HealthMissing), not "at 0": its last position is kept for
//     information, but the router must not serve reads from it on this
//     source's word. The same holds for a row whose replay_lsn is still NULL
//     (no reply yet), a reply older than Config.StaleAfter, a walsender not
//     streaming or catching up, a primary that does not answer, and a
//     watched server that is in recovery (it is no primary).
//   - LSNs are compared by value whatever the timeline, as the router's
//     Postgres flavor does. A timeline switch of the watched primary
//     (Retarget to a promoted standby, or the watched server's own timeline
//     changing) drops every session: positions are republished from the
//     new primary's rows only, counted (timeline_switches). What the old
//     timeline lost is the router's epoch logic, not the watcher's.
//
// # Freshness
//
// The walsender learns a standby's replay position only when the standby
// sends a status reply (walreceiver.c XLogWalRcvSendReply). A standby
// replies:
//
//   - when it has written or flushed new WAL, before replaying it: the
//     reply carries the replay position of that moment;
//   - when its startup process has replayed everything received and is
//     about to wait for more WAL (xlogrecovery.c,
//     WaitForWALToBecomeAvailable: once per wait), so an idle or
//     caught-up standby reports its replay promptly;
//   - right after replaying a commit record that carries the
//     apply-feedback flag, which the primary sets on commits made with
//     synchronous_commit = remote_apply (xact.c XactLogCommitRecord; the
//     standby's xact_redo_commit asks its WAL receiver for an immediate
//     reply);
//   - otherwise every wal_receiver_status_interval (default 10 s).
//
// So a standby working through a backlog reports its progress only when
// new WAL arrives, when it has caught up, or at that interval, unless
// commits ask for feedback. Without synchronous_standby_names, remote_apply does
// not make a commit wait for any standby; with it, it does (the sync
// standbys' apply). compose sets synchronous_commit = remote_apply on its
// PostgreSQL servers; Snapshot.ApplyFeedback says what the primary's
// default is. hot_standby_feedback sends xmin, not positions: it does not
// help. docs/benchmarks-walwatch.md measures the freshness.
package walwatch
