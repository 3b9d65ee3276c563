package walwatch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/gtid"
)

var t0 = time.Unix(1_700_000_000, 0)

func standbys() []Standby {
	return []Standby{{Name: "replica1", ApplicationName: "replica1"}, {Name: "replica2", ApplicationName: "walreceiver", Slot: "r2"}}
}

// row is a walsender; app "r2" is a walreceiver holding slot r2.
func row(app string, pid, start int64, state string, replay gtid.PGLSN, age time.Duration) walsender {
	slot := ""
	if app == "r2" {
		app, slot = "walreceiver", "r2"
	}
	return walsender{App: app, Slot: slot, Session: session{pid, start}, State: state, Replay: replay, HasReplay: true, ReplyAge: age, HasReply: true}
}

func obs(tli uint32, rows ...walsender) observation {
	return observation{Timeline: tli, SyncCommit: "remote_apply", Rows: rows}
}

func TestTrackerStreamingAndMissing(t *testing.T) {
	tr := newTracker(standbys(), 5*time.Second)
	ev := tr.observe(obs(1, row("replica1", 10, 1, "streaming", 100, 0), row("r2", 11, 1, "catchup", 50, time.Second)), t0)
	if got := tr.states["replica1"]; got.Health != HealthStreaming || got.ReplayLSN != 100 || !got.Known || got.Timeline != 1 {
		t.Fatalf("replica1: %+v", got)
	}
	if got := tr.states["replica2"]; got.Health != HealthStreaming || got.ReplayLSN != 50 {
		t.Fatalf("replica2 (application_name r2, catchup): %+v", got)
	}
	if len(ev.Reconnects) != 0 || len(ev.Regressions) != 0 || len(ev.Health) != 2 {
		t.Fatalf("first tick events: %+v", ev)
	}
	// replica2 disappears: unhealthy, its position kept, not 0.
	ev = tr.observe(obs(1, row("replica1", 10, 1, "streaming", 120, 0)), t0.Add(time.Second))
	if got := tr.states["replica2"]; got.Health != HealthMissing || got.ReplayLSN != 50 || got.PID != 0 {
		t.Fatalf("missing replica2: %+v", got)
	}
	if h := ev.Health["replica2"]; h != [2]Health{HealthStreaming, HealthMissing} {
		t.Fatalf("health event %v", h)
	}
	if got := tr.states["replica1"]; got.ReplayLSN != 120 || !got.Advanced.Equal(t0.Add(time.Second)) {
		t.Fatalf("replica1 advanced: %+v", got)
	}
}

func TestTrackerSessions(t *testing.T) {
	tr := newTracker(standbys(), 5*time.Second)
	tr.observe(obs(1, row("replica1", 10, 1, "streaming", 100, 0)), t0)
	// Same session going back: counted, the lower value published.
	ev := tr.observe(obs(1, row("replica1", 10, 1, "streaming", 90, 0)), t0)
	if len(ev.Regressions) != 1 || ev.Regressions[0].Cause != "session" || tr.states["replica1"].ReplayLSN != 90 {
		t.Fatalf("session regression: %+v, %+v", ev, tr.states["replica1"])
	}
	// A restarted standby: a new session, no reply yet, then lower.
	ev = tr.observe(obs(1, walsender{App: "replica1", Session: session{20, 2}, State: "streaming"}), t0)
	if tr.states["replica1"].Health != HealthNoReply || len(ev.Reconnects) != 0 {
		t.Fatalf("no reply yet: %+v %+v", tr.states["replica1"], ev)
	}
	ev = tr.observe(obs(1, row("replica1", 20, 2, "streaming", 80, 0)), t0)
	if len(ev.Reconnects) != 1 || len(ev.Regressions) != 1 || ev.Regressions[0].Cause != "reconnect" || tr.states["replica1"].ReplayLSN != 80 {
		t.Fatalf("reconnect: %+v, %+v", ev, tr.states["replica1"])
	}
	// Two walsenders under one name: the newer session's row is used.
	tr.observe(obs(1, row("replica1", 20, 2, "streaming", 85, 0), row("replica1", 30, 3, "streaming", 200, 0)), t0)
	if st := tr.states["replica1"]; st.PID != 30 || st.ReplayLSN != 200 {
		t.Fatalf("newest session: %+v", st)
	}
}

func TestTrackerHealthKinds(t *testing.T) {
	tr := newTracker(standbys(), 5*time.Second)
	tr.observe(obs(1, row("replica1", 10, 1, "streaming", 100, 6*time.Second), row("r2", 11, 1, "backup", 100, 0)), t0)
	if h := tr.states["replica1"].Health; h != HealthStale {
		t.Fatalf("old reply: %v", h)
	}
	if h := tr.states["replica2"].Health; h != HealthNotStreaming {
		t.Fatalf("backup walsender: %v", h)
	}
	tr.fail()
	if h := tr.states["replica1"].Health; h != HealthPrimaryDown {
		t.Fatalf("failed tick: %v", h)
	}
	tr.observe(observation{InRecovery: true}, t0)
	if h := tr.states["replica1"].Health; h != HealthNotPrimary {
		t.Fatalf("server in recovery: %v", h)
	}
}

func TestTrackerTimelineSwitch(t *testing.T) {
	tr := newTracker(standbys(), 5*time.Second)
	tr.observe(obs(1, row("replica1", 10, 1, "streaming", 100, 0), row("r2", 11, 1, "streaming", 100, 0)), t0)
	// Same pid and start on another timeline (the watched server was
	// promoted): still a new session.
	ev := tr.observe(obs(2, row("replica1", 10, 1, "streaming", 110, 0)), t0)
	if !ev.TimelineSwitch || ev.OldTimeline != 1 || len(ev.Reconnects) != 1 {
		t.Fatalf("timeline switch: %+v", ev)
	}
	if st := tr.states["replica1"]; st.Timeline != 2 || st.Health != HealthStreaming {
		t.Fatalf("after switch: %+v", st)
	}
	tr.retarget()
	if st := tr.states["replica1"]; st.Health != HealthUnknown || st.ReplayLSN != 110 || tr.timeline != 0 {
		t.Fatalf("after retarget: %+v (timeline %d)", st, tr.timeline)
	}
	if ev := tr.observe(obs(3, row("replica1", 40, 5, "streaming", 120, 0)), t0); ev.TimelineSwitch {
		t.Fatal("the first answer after a retarget is no switch")
	}
}

func TestParseTick(t *testing.T) {
	hdr := []string{"false", "2", "remote_apply"}
	r := func(cols ...string) []string { return append(append([]string(nil), hdr...), cols...) }
	o, err := parseTick([][]string{r("replica1", "", "42", "1700000000000000", "streaming", "0/3000148", "1500"), r("r2", "replica2", "43", "1", "startup", "", "")})
	if err != nil {
		t.Fatal(err)
	}
	if o.Timeline != 2 || o.InRecovery || len(o.Rows) != 2 || o.SyncCommit != "remote_apply" {
		t.Fatalf("%+v", o)
	}
	if w := o.Rows[0]; w.Replay != 0x3000148 || !w.HasReplay || w.ReplyAge != 1500*time.Microsecond || w.Session.PID != 42 {
		t.Fatalf("%+v", w)
	}
	if w := o.Rows[1]; w.HasReplay || w.HasReply || w.Slot != "replica2" || w.State != "startup" {
		t.Fatalf("NULL replay: %+v", w)
	}
	// No walsender: the LEFT JOIN's one row of NULLs.
	if o, err := parseTick([][]string{r("", "", "", "", "", "", "")}); err != nil || len(o.Rows) != 0 {
		t.Fatalf("no walsender: %+v %v", o, err)
	}
	if o, err := parseTick([][]string{{"true", "", "on", "", "", "", "", "", "", ""}}); err != nil || !o.InRecovery {
		t.Fatalf("in recovery: %+v %v", o, err)
	}
	for name, rows := range map[string][][]string{
		"no rows":          nil,
		"short row":        {{"false", "1"}},
		"bad bool":         {{"maybe", "1", "on", "", "", "", "", "", "", ""}},
		"timeline 0":       {{"false", "0", "on", "", "", "", "", "", "", ""}},
		"recovery and tli": {{"true", "1", "on", "", "", "", "", "", "", ""}},
		"no tli":           {{"false", "", "on", "", "", "", "", "", "", ""}},
		"bad pid":          {r("a", "", "x", "1", "streaming", "0/1", "0")},
		"bad lsn":          {r("a", "", "1", "1", "streaming", "zz", "0")},
		"bad age":          {r("a", "", "1", "1", "streaming", "0/1", "1.5")},
		"rows disagree":    {r("a", "", "1", "1", "streaming", "0/1", "0"), {"false", "3", "remote_apply", "b", "", "2", "1", "streaming", "0/1", "0"}},
		"null pid of many": {r("a", "", "1", "1", "streaming", "0/1", "0"), r("", "", "", "", "", "", "")},
	} {
		if _, err := parseTick(rows); err == nil || !strings.HasPrefix(err.Error(), "walwatch: ") {
			t.Errorf("%s: %v, want a walwatch error", name, err)
		}
	}
}

func FuzzParseTick(f *testing.F) {
	f.Add("false", "1", "on", "replica1", "", "42", "1700000000000000", "streaming", "0/3000148", "1500")
	f.Add("true", "", "remote_apply", "", "", "", "", "", "", "")
	f.Add("false", "4294967295", "off", "x", "s", "1", "-5", "catchup", "FFFFFFFF/FFFFFFFF", "-100")
	f.Add("false", "2", "on", "a", "a", "9", "1", "backup", "", "99999999999999999")
	f.Fuzz(func(t *testing.T, rec, tli, sc, app, slot, pid, start, state, lsn, age string) {
		r := []string{rec, tli, sc, app, slot, pid, start, state, lsn, age}
		o, err := parseTick([][]string{r, r})
		if err != nil {
			return
		}
		for _, w := range o.Rows {
			if w.Session.PID <= 0 || w.ReplyAge < 0 {
				t.Fatalf("accepted %+v", w)
			}
		}
		// The tracker takes whatever parses.
		tr := newTracker([]Standby{{Name: "n", ApplicationName: app}, {Name: "m", Slot: "s"}}, time.Second)
		tr.observe(o, t0)
		if h := tr.states["n"].Health; h == HealthUnknown {
			t.Fatalf("health still unknown after an observation of %+v", o)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Primary: "127.0.0.1:5432", User: "u", Standbys: []Standby{{Name: "a"}}}
	c := ok
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Standbys[0].ApplicationName != "a" || c.Interval != 10*time.Millisecond || c.DownAfter != 500*time.Millisecond || c.RetryInterval != 100*time.Millisecond {
		t.Fatalf("defaults: %+v", c)
	}
	for name, mod := range map[string]func(*Config){
		"no primary":    func(c *Config) { c.Primary = "" },
		"no user":       func(c *Config) { c.User = "" },
		"no standbys":   func(c *Config) { c.Standbys = nil },
		"no name":       func(c *Config) { c.Standbys = []Standby{{}} },
		"dup name":      func(c *Config) { c.Standbys = []Standby{{Name: "a"}, {Name: "a", ApplicationName: "b"}} },
		"dup app":       func(c *Config) { c.Standbys = []Standby{{Name: "a"}, {Name: "b", ApplicationName: "a"}} },
		"dup slot":      func(c *Config) { c.Standbys = []Standby{{Name: "a", Slot: "s"}, {Name: "b", Slot: "s"}} },
		"interval":      func(c *Config) { c.Interval = time.Microsecond },
		"down < tick":   func(c *Config) { c.Interval, c.DownAfter = time.Second, time.Millisecond },
		"neg timeout":   func(c *Config) { c.QueryTimeout = -1 },
		"neg dial":      func(c *Config) { c.DialTimeout = -1 },
		"neg retry":     func(c *Config) { c.RetryInterval = -1 },
		"interval long": func(c *Config) { c.Interval = 2 * time.Minute },
	} {
		c := ok
		c.Standbys = append([]Standby(nil), ok.Standbys...)
		mod(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPublishWakesOnChangeOnly: a tick that changes only reply ages keeps
// the changed channel (no waiter woken); a new position closes it and
// WaitFor returns; an unknown name is a typed error; a stale Run makes
// Position say primary-down.
func TestPublishWakesOnChangeOnly(t *testing.T) {
	now := t0
	w, err := New(Config{Primary: "127.0.0.1:1", User: "u", Standbys: standbys(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker(w.cfg.Standbys, w.cfg.StaleAfter)
	tr.observe(obs(1, row("replica1", 10, 1, "streaming", 100, 0)), now)
	w.publish(tr, "p", true, true, now)
	s1 := w.Snapshot()
	tr.observe(obs(1, row("replica1", 10, 1, "streaming", 100, time.Millisecond)), now)
	w.publish(tr, "p", true, true, now)
	if s2 := w.Snapshot(); s2.changed != s1.changed || s2.Seq != s1.Seq {
		t.Fatal("a reply-age-only tick woke waiters")
	}
	done := make(chan error, 1)
	go func() { done <- w.WaitFor(context.Background(), "replica1", 150) }()
	tr.observe(obs(1, row("replica1", 10, 1, "streaming", 160, 0)), now)
	w.publish(tr, "p", true, true, now)
	select {
	case <-s1.Changed():
	default:
		t.Fatal("a new position did not close the changed channel")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.WaitFor(context.Background(), "nope", 1); !errors.Is(err, ErrUnknownStandby) {
		t.Fatalf("unknown standby: %v", err)
	}
	if _, h := w.Position("replica1"); h != HealthStreaming {
		t.Fatalf("health %v", h)
	}
	now = now.Add(time.Second)
	if lsn, h := w.Position("replica1"); h != HealthPrimaryDown || lsn != 160 {
		t.Fatalf("no tick for 1s: %v %v", lsn, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.WaitFor(ctx, "replica2", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

// TestSharedRegistry: two watchers on one registry share its collectors
// (labelled by watcher) instead of failing or counting unseen.
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	var ws []*Watcher
	for _, name := range []string{"a", "b"} {
		w, err := New(Config{Name: name, Primary: "127.0.0.1:1", User: "u", Standbys: standbys(), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if ws[0].m.ticks != ws[1].m.ticks {
		t.Fatal("the second watcher did not adopt the registered collector")
	}
	ws[1].record(events{TimelineSwitch: true})
	if n := testutil.ToFloat64(ws[0].m.timelineSwitches.WithLabelValues("b")); n != 1 {
		t.Fatalf("timeline switches of b through the shared collector: %v", n)
	}
}
