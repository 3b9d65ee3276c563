package live

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

const (
	uA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
)

func set(t *testing.T, s string) gtid.Set {
	t.Helper()
	g, err := gtid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// funcRouter is a Router built without I/O (build) over a staticSource:
// primary "p" at uA:1-10, replica "r1" at uA:1-10, replica "r2" at
// uA:1-5. The primary's address refuses connections (a re-read of its
// position fails fast).
func funcRouter(t *testing.T, mut func(*Config[gtid.Set])) (*Router[gtid.Set], *staticSource) {
	t.Helper()
	src := &staticSource{pos: map[string]gtid.Set{
		"p": set(t, uA+":1-10"), "r1": set(t, uA+":1-10"), "r2": set(t, uA+":1-5"),
	}, up: map[string]bool{"p": true, "r1": true, "r2": true}}
	refused := refusedAddr(t)
	cfg := Config[gtid.Set]{
		Primary:     Node{Name: "p", Addr: refused},
		Replicas:    []Node{{Name: "r1", Addr: refused}, {Name: "r2", Addr: refused}},
		Policy:      router.Policy{Kind: router.PolicyTokenRYW, CheckEpoch: true},
		Positions:   src,
		Epoch:       1,
		Wait:        WaitGTIDFunction,
		DialTimeout: 200 * time.Millisecond,
		Trace:       true,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Seed:        7,
	}
	if mut != nil {
		mut(&cfg)
	}
	r, err := build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.st.PrimaryPos = src.pos["p"]
	return r, src
}

// runRec records run calls and answers from a script.
type runRec struct {
	calls []Target
	errs  []error // error of call i (nil: success)
	obs   gtid.Set
}

func (rr *runRec) run(_ context.Context, t Target) (gtid.Set, error) {
	i := len(rr.calls)
	rr.calls = append(rr.calls, t)
	if i < len(rr.errs) && rr.errs[i] != nil {
		return gtid.Set{}, rr.errs[i]
	}
	if t.Watermark {
		return rr.obs, nil
	}
	return gtid.Set{}, nil
}

func TestQueryFunc(t *testing.T) {
	ctx := context.Background()
	myErr := mysql.NewError(1146, "no such table")
	cases := []struct {
		name    string
		cfg     func(*Config[gtid.Set])
		src     func(*staticSource)
		policy  router.PolicyKind
		token   string // the session's token (epoch 1), "" none
		opts    func(*testing.T) ReadOptions[gtid.Set]
		errs    []error
		obs     string
		wantErr error // errors.Is target, nil: served
		// the targets run was called with: node names, outcome of the last
		want     []string
		wantOut  router.Outcome
		wantPin  Pin
		wantDown []string // nodes marked down
		check    func(*testing.T, *Router[gtid.Set], *LiveSession[gtid.Set], *Read[gtid.Set])
	}{
		{name: "replica with the token", policy: router.PolicyTokenRYW, token: uA + ":8",
			want: []string{"r1"}, wantOut: router.OutReplica},
		{name: "no token: any replica", policy: router.PolicyTokenRYW,
			want: []string{"r1"}, wantOut: router.OutReplica},
		{name: "nobody has it: fallback", policy: router.PolicyTokenRYW, token: uA + ":8",
			src:  func(s *staticSource) { s.pos["r1"] = set(t, uA+":1-5") },
			want: []string{"p"}, wantOut: router.OutFallback,
			check: func(t *testing.T, r *Router[gtid.Set], _ *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if n := testutil.ToFloat64(r.m.fallbacks.WithLabelValues(router.ReasonNoReplicaQualifies.String())); n != 1 {
					t.Errorf("freshness fallbacks = %v, want 1", n)
				}
			}},
		{name: "per-read token is not kept", policy: router.PolicyTokenRYW,
			opts: func(t *testing.T) ReadOptions[gtid.Set] {
				return ReadOptions[gtid.Set]{Token: set(t, uA+":9"), TokenEpoch: 1}
			},
			src:  func(s *staticSource) { s.pos["r1"] = set(t, uA+":1-5") },
			want: []string{"p"}, wantOut: router.OutFallback,
			check: func(t *testing.T, _ *Router[gtid.Set], s *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if s.State().HasToken {
					t.Errorf("session kept the read's token: %+v", s.State())
				}
			}},
		{name: "sound watermark from run", policy: router.PolicyTokenRYWMR, obs: uA + ":1-12",
			want: []string{"r1"}, wantOut: router.OutReplica,
			check: func(t *testing.T, _ *Router[gtid.Set], s *LiveSession[gtid.Set], rd *Read[gtid.Set]) {
				if st := s.State(); !st.HasSeen || !st.Seen.Equal(set(t, uA+":1-12")) {
					t.Errorf("watermark = %v, want what run observed %s", st.Seen, uA+":1-12")
				}
			}},
		{name: "unsound watermark: the view", policy: router.PolicyTokenRYWMR, obs: uA + ":1-12",
			cfg:  func(c *Config[gtid.Set]) { c.Watermark = WatermarkViewAtDecision },
			want: []string{"r1"}, wantOut: router.OutReplica,
			check: func(t *testing.T, _ *Router[gtid.Set], s *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if st := s.State(); !st.Seen.Equal(set(t, uA+":1-10")) {
					t.Errorf("watermark = %v, want the view's %s", st.Seen, uA+":1-10")
				}
			}},
		{name: "pinned: no decision", policy: router.PolicyTokenRYW, token: uA + ":8",
			opts: func(*testing.T) ReadOptions[gtid.Set] { return ReadOptions[gtid.Set]{Pin: PinTransaction} },
			want: []string{"p"}, wantOut: router.OutPrimary, wantPin: PinTransaction,
			check: func(t *testing.T, r *Router[gtid.Set], _ *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if n := testutil.CollectAndCount(r.m.decisions); n != 0 {
					t.Errorf("%d decision series for a pinned read", n)
				}
				if n := testutil.ToFloat64(r.m.reads.WithLabelValues("token-ryw", "primary", "in-transaction")); n != 1 {
					t.Errorf("pinned read count = %v", n)
				}
			}},
		{name: "statement error: returned, node stays up", policy: router.PolicyTokenRYW,
			errs: []error{myErr}, wantErr: myErr, want: []string{"r1"}},
		{name: "node error: marked down, decided again", policy: router.PolicyTokenRYW, token: uA + ":3",
			errs: []error{errors.New("broken pipe")}, want: []string{"r1", "r2"}, wantOut: router.OutReplica,
			wantDown: []string{"r1"}},
		{name: "RunError no retry", policy: router.PolicyTokenRYW, token: uA + ":3",
			errs: []error{&RunError{Err: io.ErrUnexpectedEOF, NodeFailed: true}}, wantErr: io.ErrUnexpectedEOF,
			want: []string{"r1"}, wantDown: []string{"r1"}},
		{name: "RunError caller: node stays up", policy: router.PolicyTokenRYW, token: uA + ":3",
			errs: []error{&RunError{Err: io.ErrClosedPipe}}, wantErr: io.ErrClosedPipe, want: []string{"r1"},
			check: func(t *testing.T, r *Router[gtid.Set], _ *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if n := testutil.ToFloat64(r.m.reads.WithLabelValues("token-ryw", "error", "caller")); n != 1 {
					t.Errorf("caller errors = %v", n)
				}
			}},
		{name: "wait on the caller's connection", policy: router.PolicyTokenWait, token: uA + ":8",
			src: func(s *staticSource) { s.pos["r1"] = set(t, uA+":1-7"); s.pos["r2"] = set(t, uA+":1-5") },
			opts: func(t *testing.T) ReadOptions[gtid.Set] {
				return ReadOptions[gtid.Set]{Wait: func(_ context.Context, tg Target, need gtid.Set, budget time.Duration) (bool, error) {
					if tg.Node.Name != "r1" || !need.Equal(set(t, uA+":8")) || budget <= 0 {
						t.Errorf("wait(%v, %v, %v)", tg.Node.Name, need, budget)
					}
					return true, nil
				}}
			},
			want: []string{"r1"}, wantOut: router.OutReplica,
			check: func(t *testing.T, _ *Router[gtid.Set], _ *LiveSession[gtid.Set], rd *Read[gtid.Set]) {
				if rd.Waited <= 0 {
					t.Errorf("Waited = %v", rd.Waited)
				}
			}},
		{name: "wait refused by the caller: read ends, node stays up", policy: router.PolicyTokenWait, token: uA + ":8",
			src: func(s *staticSource) { s.pos["r1"] = set(t, uA+":1-7"); s.pos["r2"] = set(t, uA+":1-5") },
			opts: func(t *testing.T) ReadOptions[gtid.Set] {
				return ReadOptions[gtid.Set]{Wait: func(context.Context, Target, gtid.Set, time.Duration) (bool, error) {
					return false, &RunError{Err: io.ErrClosedPipe}
				}}
			},
			wantErr: io.ErrClosedPipe,
			check: func(t *testing.T, r *Router[gtid.Set], _ *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if n := testutil.ToFloat64(r.m.reads.WithLabelValues("token-wait", "error", "caller")); n != 1 {
					t.Errorf("caller errors = %v, want 1", n)
				}
			}},
		{name: "wait failed on the node: marked down, decided again", policy: router.PolicyTokenWait, token: uA + ":8",
			src: func(s *staticSource) { s.pos["r1"] = set(t, uA+":1-7"); s.pos["r2"] = set(t, uA+":1-5") },
			opts: func(t *testing.T) ReadOptions[gtid.Set] {
				return ReadOptions[gtid.Set]{Wait: func(_ context.Context, tg Target, _ gtid.Set, _ time.Duration) (bool, error) {
					return false, &RunError{Err: io.ErrUnexpectedEOF, NodeFailed: true}
				}}
			},
			want: []string{"p"}, wantOut: router.OutPrimary, wantDown: []string{"r1", "r2"}},
		{name: "cap fail-fast: run not called", policy: router.PolicyTokenRYW, token: uA + ":8",
			cfg:  func(c *Config[gtid.Set]) { c.Cap = router.Cap{PerSecond: 1, Burst: 1, Behavior: router.CapFailFast} },
			src:  func(s *staticSource) { s.pos["r1"] = set(t, uA+":1-5") },
			opts: func(*testing.T) ReadOptions[gtid.Set] { return ReadOptions[gtid.Set]{} },
			check: func(t *testing.T, r *Router[gtid.Set], s *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				// The first read took the bucket's token; the second is refused.
				var rr runRec
				_, err := s.QueryFunc(context.Background(), s.policy, ReadOptions[gtid.Set]{}, rr.run)
				if !errors.Is(err, ErrCapExceeded) || len(rr.calls) != 0 {
					t.Errorf("second read: err=%v calls=%v", err, rr.calls)
				}
			},
			want: []string{"p"}, wantOut: router.OutFallback},
		{name: "token the primary lacks: timed out after a re-read", policy: router.PolicyTokenRYW, token: uA + ":11",
			wantErr: ErrTimedOut,
			check: func(t *testing.T, r *Router[gtid.Set], _ *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if n := testutil.ToFloat64(r.m.refreshes); n != 1 {
					t.Errorf("primary re-reads = %v, want 1", n)
				}
			}},
		{name: "old-epoch token in the primary: re-anchored", policy: router.PolicyTokenRYW, token: uA + ":8",
			cfg:  func(c *Config[gtid.Set]) { c.Epoch = 2 },
			want: []string{"r1"}, wantOut: router.OutReplica,
			check: func(t *testing.T, _ *Router[gtid.Set], s *LiveSession[gtid.Set], _ *Read[gtid.Set]) {
				if gtok(s).Epoch != 2 {
					t.Errorf("token epoch = %d, want 2", gtok(s).Epoch)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, src := funcRouter(t, c.cfg)
			if c.src != nil {
				c.src(src)
			}
			s := r.NewSession()
			if err := s.SetPolicy(router.Policy{Kind: c.policy, CheckEpoch: true, WaitBudget: 50 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			if c.token != "" {
				s.AddToken(set(t, c.token), 1)
			}
			before := s.State()
			var o ReadOptions[gtid.Set]
			if c.opts != nil {
				o = c.opts(t)
			}
			rr := runRec{errs: c.errs}
			if c.obs != "" {
				rr.obs = set(t, c.obs)
			}
			rd, err := s.QueryFunc(ctx, s.policy, o, rr.run)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
			} else if err != nil {
				t.Fatalf("err = %v", err)
			}
			var got []string
			for _, tg := range rr.calls {
				got = append(got, tg.Node.Name)
			}
			if len(got) != len(c.want) {
				t.Fatalf("run called on %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("run called on %v, want %v", got, c.want)
				}
			}
			if err == nil {
				last := rr.calls[len(rr.calls)-1]
				if rd.Outcome != c.wantOut || last.Outcome != c.wantOut || rd.Node != last.Node.Name || rd.Pin != c.wantPin || last.Pin != c.wantPin {
					t.Errorf("read %+v, target %+v; want outcome %v pin %q", rd, last, c.wantOut, c.wantPin)
				}
				if c.wantPin == "" && len(rd.Trace) == 0 {
					t.Error("no trace with Config.Trace")
				}
				wantWM := c.policy == router.PolicyTokenRYWMR || c.policy == router.PolicyTokenWait
				if c.cfg == nil && c.wantPin == "" && last.Watermark != wantWM {
					t.Errorf("target.Watermark = %v under %v", last.Watermark, c.policy)
				}
			}
			for _, n := range []string{"r1", "r2"} {
				down := time.Now().Before(r.st.DownUntil[n])
				want := false
				for _, w := range c.wantDown {
					want = want || w == n
				}
				if down != want {
					t.Errorf("%s down = %v, want %v", n, down, want)
				}
			}
			if st := s.State(); c.check == nil && before.HasToken && !st.Token.Equal(before.Token) {
				t.Errorf("token changed by a read: %v -> %v", before.Token, st.Token)
			}
			for n, k := range r.st.InFlight { // entries stay, at zero (inFlight)
				if k != 0 {
					t.Errorf("in-flight count left on %s: %d", n, k)
				}
			}
			if c.check != nil {
				c.check(t, r, s, rd)
			}
		})
	}
}

func TestRecordAckAndSetToken(t *testing.T) {
	r, _ := funcRouter(t, nil)
	s := r.NewSession()
	// A GTID the source has not seen yet, acknowledged on the caller's own
	// connection: the token holds it, and the primary's bound too, so the
	// read falls back to the primary instead of timing out.
	s.RecordAck(set(t, uA+":11"))
	if tok := gtok(s); tok.Epoch != 1 || !tok.GTIDs.Equal(set(t, uA+":11")) {
		t.Fatalf("token = %+v", tok)
	}
	if !r.st.PrimaryPos.Contains(set(t, uA+":11")) {
		t.Fatalf("primary bound %v lacks the ack", r.st.PrimaryPos)
	}
	var rr runRec
	rd, err := s.QueryFunc(context.Background(), s.policy, ReadOptions[gtid.Set]{}, rr.run)
	if err != nil || rd.Outcome != router.OutFallback || rd.Node != "p" {
		t.Fatalf("read = %+v, %v", rd, err)
	}
	if n := testutil.ToFloat64(r.m.refreshes); n != 0 {
		t.Errorf("re-read the primary %v times although the ack raised its bound", n)
	}
	s.SetToken(set(t, uA+":2"), 1)
	if tok := gtok(s); !tok.GTIDs.Equal(set(t, uA+":2")) {
		t.Errorf("SetToken did not replace: %v", tok)
	}
	s.SetToken(gtid.Set{}, 0)
	if s.State().HasToken {
		t.Error("SetToken(empty) did not clear")
	}
	s.RecordAck(gtid.Set{})
	if s.State().HasToken {
		t.Error("RecordAck(empty) made a token")
	}
}

// TestStartAfterAcked: a new session can start from every write the
// router's sessions were acknowledged in the epoch, each source's prefix
// (LiveState.Acked); a failover starts the set afresh.
func TestStartAfterAcked(t *testing.T) {
	r, _ := funcRouter(t, nil)
	empty := r.NewSession()
	empty.StartAfterAcked()
	if empty.State().HasToken {
		t.Fatal("a token from no write")
	}
	const uB = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	r.NewSession().RecordAck(set(t, uA+":11"))
	r.NewSession().RecordAck(set(t, uB+":3"))
	r.NewSession().RecordAck(set(t, uA+":5")) // inside the prefix: no change
	s := r.NewSession()
	s.StartAfterAcked()
	if tok := gtok(s); tok.Epoch != 1 || !tok.GTIDs.Equal(set(t, uA+":1-11,"+uB+":1-3")) {
		t.Fatalf("start token = %+v, want %s:1-11,%s:1-3 in epoch 1", tok, uA, uB)
	}
	if err := r.FailoverAt(r.st.Primary, r.st.Replicas, 2, set(t, uA+":1-11")); err != nil {
		t.Fatal(err)
	}
	after := r.NewSession()
	after.StartAfterAcked()
	if after.State().HasToken {
		t.Fatalf("start token %+v after a failover with no write since", gtok(after))
	}
	r.NewSession().RecordAck(set(t, uB+":4"))
	after.StartAfterAcked()
	if tok := gtok(after); tok.Epoch != 2 || !tok.GTIDs.Equal(set(t, uB+":1-4")) {
		t.Fatalf("start token after the failover = %+v, want %s:1-4 in epoch 2", tok, uB)
	}
}

func TestErrAttrOneLine(t *testing.T) {
	a := errAttr(errors.New("line one\nline two\r\n  at stack"))
	if v := a.Value.String(); v != "line one | line two | at stack" {
		t.Errorf("errAttr = %q", v)
	}
}

// refusedAddr is a loopback address nothing listens on (a port the kernel
// just handed out and took back): a dial is refused at once. A fixed port
// is not safe on a shared machine (something listened on 127.0.0.1:1).
func refusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestSeenCarried: a session's watermark goes out with Seen and comes in
// with AddSeen (a signed session token), raising the other session's
// watermark with its epoch; an empty one adds nothing, and what Seen
// returns shares no memory with the session.
func TestSeenCarried(t *testing.T) {
	r, _ := funcRouter(t, nil)
	a := r.NewSession()
	if pos, epoch := a.Seen(); !pos.IsEmpty() || epoch != 0 {
		t.Fatalf("a new session's seen: %v in epoch %d", pos, epoch)
	}
	a.AddSeen(set(t, ""), 1)
	if a.State().HasSeen {
		t.Fatal("an empty seen raised the watermark")
	}
	a.AddSeen(set(t, uA+":1-7"), 1)
	pos, epoch := a.Seen()
	if !pos.Equal(set(t, uA+":1-7")) || epoch != 1 {
		t.Fatalf("seen after AddSeen: %v in epoch %d", pos, epoch)
	}
	b := r.NewSession()
	b.AddSeen(pos, epoch)
	b.AddSeen(set(t, uA+":9"), 1)
	if st := b.State(); !st.HasSeen || !st.Seen.Equal(set(t, uA+":1-7:9")) || st.SeenEpoch != 1 || st.HasToken {
		t.Fatalf("carried into another session: %+v", st)
	}
	if pos, _ := a.Seen(); !pos.Equal(set(t, uA+":1-7")) {
		t.Fatalf("the first session's seen changed with the second's: %v", pos)
	}
}

// TestPinnedReadRaisesSeen: under the monotonic-reads policies a read
// pinned to the primary (a locking read, a transaction's) asks for the
// primary's watermark after it and raises the session's with it, so the
// next routed read needs a replica that has what the pinned read saw
// (before, r2, behind it, could serve); under token-ryw nothing is asked.
func TestPinnedReadRaisesSeen(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		policy router.PolicyKind
		want   bool
	}{{router.PolicyTokenRYWMR, true}, {router.PolicyTokenWait, true}, {router.PolicyTokenRYW, false}} {
		r, _ := funcRouter(t, nil)
		s := r.NewSession()
		pol := router.Policy{Kind: c.policy, CheckEpoch: true, WaitBudget: time.Millisecond}
		rr := runRec{obs: set(t, uA+":1-10")}
		if _, err := s.QueryFunc(ctx, pol, ReadOptions[gtid.Set]{Pin: PinTransaction}, rr.run); err != nil {
			t.Fatal(err)
		}
		if got := rr.calls[0].Watermark; got != c.want {
			t.Errorf("%v: pinned read's target.Watermark = %v, want %v", c.policy, got, c.want)
		}
		st := s.State()
		if st.HasSeen != c.want || c.want && (!st.Seen.Equal(set(t, uA+":1-10")) || st.SeenEpoch != 1) {
			t.Errorf("%v: after a pinned read the watermark is %+v", c.policy, st)
		}
		if !c.want {
			continue
		}
		rr = runRec{obs: set(t, uA+":1-10")}
		if _, err := r.NewSession().QueryFunc(ctx, pol, ReadOptions[gtid.Set]{Pin: PinNoReplicas}, rr.run); err != nil || rr.calls[0].Watermark {
			t.Errorf("%v: a read pinned for want of replicas asked for a watermark (%v)", c.policy, err)
		}
		// The next routed read: r2 (1-5) does not qualify, r1 (1-10) does.
		for range 20 {
			rr := runRec{}
			if _, err := s.QueryFunc(ctx, pol, ReadOptions[gtid.Set]{}, rr.run); err != nil {
				t.Fatal(err)
			}
			if n := rr.calls[len(rr.calls)-1].Node.Name; n == "r2" {
				t.Fatalf("%v: a routed read after the pinned one served by r2, behind what it saw", c.policy)
			}
		}
	}
}
