package walwatch

import (
	"time"

	"github.com/causallab/causallab/gtid"
)

// Health is a standby's state as the watcher sees it. Only
// HealthStreaming lets a reader use the position.
type Health int

const (
	// HealthUnknown: nothing read yet (start, or after a Retarget).
	HealthUnknown Health = iota
	// HealthStreaming: in pg_stat_replication, streaming or catching up,
	// with a replay_lsn and a recent reply.
	HealthStreaming
	// HealthMissing: not in the primary's pg_stat_replication (stopped,
	// partitioned, repointed elsewhere, or promoted).
	HealthMissing
	// HealthNoReply: a walsender row whose replay_lsn is still NULL.
	HealthNoReply
	// HealthStale: the last reply is older than Config.StaleAfter.
	HealthStale
	// HealthNotStreaming: the walsender is starting, sending a base
	// backup or stopping.
	HealthNotStreaming
	// HealthPrimaryDown: the primary did not answer (dial or query
	// failed, or no answer for Config.DownAfter).
	HealthPrimaryDown
	// HealthNotPrimary: the watched server is in recovery.
	HealthNotPrimary
)

var healthNames = [...]string{"unknown", "streaming", "missing", "no-reply", "stale", "not-streaming", "primary-down", "not-primary"}

func (h Health) String() string {
	if h < 0 || int(h) >= len(healthNames) {
		return "invalid"
	}
	return healthNames[h]
}

// MarshalText implements encoding.TextMarshaler.
func (h Health) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// StandbyState is one standby in a Snapshot.
type StandbyState struct {
	// Name and ApplicationName are the configured standby's.
	Name, ApplicationName string
	// Health says whether ReplayLSN may be used (HealthStreaming).
	Health Health
	// ReplayLSN is the replay position of the standby's last reply in its
	// current (or, unhealthy, last) walsender session; Known is false until
	// one was read.
	ReplayLSN gtid.PGLSN
	Known     bool
	// Timeline is the primary's timeline when ReplayLSN was read.
	Timeline uint32
	// State is the walsender's state ("" when missing).
	State string
	// PID is the walsender's process ID (0 when missing).
	PID int64
	// ReplyAge is the age of the last reply at the last tick.
	ReplyAge time.Duration
	// Advanced is when ReplayLSN last changed (the watcher's clock).
	Advanced time.Time
}

// same reports whether a and b differ only in ReplyAge: a tick that
// changes nothing else wakes no waiter.
func (a StandbyState) same(b StandbyState) bool {
	a.ReplyAge, b.ReplyAge = 0, 0
	return a == b
}

// regression is a replay_lsn below the published one.
type regression struct {
	Standby string
	// Cause is "session" (the same walsender session went back: not
	// expected) or "reconnect" (a new session starts lower).
	Cause    string
	From, To gtid.PGLSN
}

// events are what one tick changed, for metrics and logs.
type events struct {
	Reconnects     []string // standbys with a new walsender session
	Regressions    []regression
	TimelineSwitch bool
	OldTimeline    uint32
	Health         map[string][2]Health // standby: old, new (changed only)
}

// tracker is the watcher's deterministic core: it folds observations
// into per-standby states. Not safe for concurrent use (Run owns it).
type tracker struct {
	staleAfter time.Duration
	standbys   []Standby
	timeline   uint32 // 0: unknown
	sessions   map[string]session
	states     map[string]StandbyState // by Name
}

func newTracker(standbys []Standby, staleAfter time.Duration) *tracker {
	t := &tracker{staleAfter: staleAfter, standbys: standbys, sessions: map[string]session{}, states: map[string]StandbyState{}}
	for _, s := range standbys {
		t.states[s.Name] = StandbyState{Name: s.Name, ApplicationName: s.ApplicationName}
	}
	return t
}

// set records st as standby's state, noting a health change in ev.
func (t *tracker) set(ev *events, st StandbyState) {
	old := t.states[st.Name]
	if old.Health != st.Health {
		if ev.Health == nil {
			ev.Health = map[string][2]Health{}
		}
		ev.Health[st.Name] = [2]Health{old.Health, st.Health}
	}
	t.states[st.Name] = st
}

// observe folds one tick's observation read at now.
func (t *tracker) observe(o observation, now time.Time) events {
	var ev events
	if o.InRecovery {
		t.sessions = map[string]session{}
		for _, s := range t.standbys {
			st := t.states[s.Name]
			st.Health, st.State, st.PID = HealthNotPrimary, "", 0
			t.set(&ev, st)
		}
		return ev
	}
	if t.timeline != 0 && o.Timeline != t.timeline {
		ev.TimelineSwitch, ev.OldTimeline = true, t.timeline
		t.sessions = map[string]session{}
	}
	t.timeline = o.Timeline
	byKey := make(map[string]*walsender, 2*len(o.Rows))
	keep := func(k string, w *walsender) {
		// Two walsenders under one name (a standby reconnecting while its
		// old walsender has not exited yet): the newer session wins.
		if prev, ok := byKey[k]; !ok || w.Session.Start > prev.Session.Start ||
			(w.Session.Start == prev.Session.Start && w.Session.PID > prev.Session.PID) {
			byKey[k] = w
		}
	}
	for i := range o.Rows {
		w := &o.Rows[i]
		keep("app:"+w.App, w)
		if w.Slot != "" {
			keep("slot:"+w.Slot, w)
		}
	}
	for _, s := range t.standbys {
		st := t.states[s.Name]
		key := "app:" + s.ApplicationName
		if s.Slot != "" {
			key = "slot:" + s.Slot
		}
		w, ok := byKey[key]
		if !ok {
			delete(t.sessions, s.Name)
			st.Health, st.State, st.PID, st.ReplyAge = HealthMissing, "", 0, 0
			t.set(&ev, st)
			continue
		}
		st.State, st.PID, st.ReplyAge = w.State, w.Session.PID, w.ReplyAge
		if !w.HasReplay {
			// A new session without a reply yet: the old position belongs
			// to a session that ended.
			if cur, ok := t.sessions[s.Name]; ok && cur != w.Session {
				delete(t.sessions, s.Name)
			}
			st.Health = HealthNoReply
			t.set(&ev, st)
			continue
		}
		cur, had := t.sessions[s.Name]
		switch {
		case !had || cur != w.Session:
			if st.Known {
				ev.Reconnects = append(ev.Reconnects, s.Name)
				if w.Replay < st.ReplayLSN {
					ev.Regressions = append(ev.Regressions, regression{s.Name, "reconnect", st.ReplayLSN, w.Replay})
				}
			}
			t.sessions[s.Name] = w.Session
		case w.Replay < st.ReplayLSN:
			ev.Regressions = append(ev.Regressions, regression{s.Name, "session", st.ReplayLSN, w.Replay})
		}
		if !st.Known || w.Replay != st.ReplayLSN || st.Timeline != o.Timeline {
			st.Advanced = now
		}
		st.ReplayLSN, st.Known, st.Timeline = w.Replay, true, o.Timeline
		switch {
		case w.State != "streaming" && w.State != "catchup":
			st.Health = HealthNotStreaming
		case t.staleAfter > 0 && (!w.HasReply || w.ReplyAge > t.staleAfter):
			st.Health = HealthStale
		default:
			st.Health = HealthStreaming
		}
		t.set(&ev, st)
	}
	return ev
}

// fail records a tick that got no answer: every standby is
// HealthPrimaryDown (sessions are kept: the next answer tells whether
// they still run).
func (t *tracker) fail() events {
	var ev events
	for _, s := range t.standbys {
		st := t.states[s.Name]
		st.Health = HealthPrimaryDown
		t.set(&ev, st)
	}
	return ev
}

// retarget forgets the old primary: sessions and timeline, every standby
// HealthUnknown until the new primary answers (positions kept for
// information, unusable).
func (t *tracker) retarget() events {
	var ev events
	t.sessions = map[string]session{}
	t.timeline = 0
	for _, s := range t.standbys {
		st := t.states[s.Name]
		st.Health, st.State, st.PID, st.ReplyAge = HealthUnknown, "", 0, 0
		t.set(&ev, st)
	}
	return ev
}

// snapshotStates copies the states (the snapshot's own map).
func (t *tracker) snapshotStates() map[string]StandbyState {
	m := make(map[string]StandbyState, len(t.states))
	for k, v := range t.states {
		m[k] = v
	}
	return m
}
