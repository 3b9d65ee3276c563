package lab

import (
	"fmt"
	"time"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// Ground truth.
//
// A violation is counted only from what the database returned, never from
// what a router believed. Every write carries a per-session sequence number
// (Seq) that the session's own row stores, and bumps one of a few shared hot
// rows, reporting the version it gave it; every read returns, in one
// statement (one InnoDB read view), the session's own row and every hot row.
// docs/lab-checks.md argues why the three checks below (read-your-writes,
// monotonic reads, all-writes) find every violation they claim and claim
// only real ones.

// Read is one read as the driver saw it: what the session had been
// acknowledged when it issued the read, and what the database returned.
type Read struct {
	// Session is the session's index, 0..S-1.
	Session int
	// AckedSeq is the Seq of the session's last write acknowledged before the
	// read was issued; 0 when it had none.
	AckedSeq int64
	// AckedHot holds, per hot row, the highest version any session's write
	// had been acknowledged with before the read was issued (WriteAck.Hot):
	// the all-writes check's floor. nil: not checked.
	AckedHot []int64
	// Own is the version the session's own row held in the serving node's
	// answer (meaningful when Outcome.Served()).
	Own int64
	// Hot holds every hot row's version in the answer, indexed by hot row
	// (meaningful when Outcome.Served()). The checker does not keep it.
	Hot []int64
	// Outcome is how the read ended (router.OutFallback: the router sent it
	// to the primary for freshness, not for policy reasons).
	Outcome router.Outcome
	// Waited is true when the router waited for a replica to catch up.
	Waited bool
	// Issued and Done are times since the start of the run.
	Issued, Done time.Duration
	// Node names the node that served the read ("" when not served).
	Node string
	// Reason is the router's reason for the final decision.
	Reason string
	// HashReason is hashroute's reason for an affinity read (the router's
	// own: first choice, reselected, remapped, rebalanced).
	HashReason hashroute.Reason
	// ResetSeen is true when the router told the client, with a typed
	// error, that data the session was shown was lost in a failover
	// (router.ReasonSeenLost). The checker then restarts the session's
	// monotonic-reads watermark: the loss was declared, not silent, and is
	// counted in Tally.DeclaredLosses instead of as later MR violations.
	ResetSeen bool
	// ResetScope makes ResetSeen restart every session whose current
	// monotonic-reads scope is Conn (not only this read's): the proxy
	// keeps the watermark per client connection, which the lab's sessions
	// share, and told that connection's client of the loss.
	ResetScope bool
	// Conn identifies the connection whose monotonic-reads watermark
	// covered the read, where the router keeps that watermark per client
	// connection rather than per session: under --via proxy, the id the
	// proxy gave the lab's connection (ViaProxy); 0 where the session's
	// watermark outlives any connection (router/live keeps it in the
	// session). A served read on another connection than the session's
	// previous served read starts a new scope of the guarantee: the
	// checker counts it as a reconnect, restarts the session's watermark,
	// and counts a hot row below the old watermark in
	// Verdict.MRAcrossReconnect, not in Verdict.MR.
	Conn uint32
}

// Verdict is the checker's judgement of one read.
type Verdict struct {
	// RYW: the answer lacked the session's last acknowledged write.
	RYW bool
	// MR: some hot row's version was lower than in an earlier answer to the
	// same session (the session saw the world go backwards).
	MR bool
	// MRRow is the first hot row that went backwards (when MR or
	// MRAcrossReconnect).
	MRRow int
	// Reconnect: the read was served on another connection than the
	// session's previous served read (Read.Conn): the router's
	// monotonic-reads guarantee restarted with it.
	Reconnect bool
	// MRAcrossReconnect: a Reconnect read in which some hot row was lower
	// than in an answer the session had on its earlier connection. The
	// router promised nothing across the two connections, so it is not an
	// MR violation, but the session's user saw the world go backwards: it
	// is counted, never dropped.
	MRAcrossReconnect bool
	// OwnBackwards: the session's own row was lower than in an earlier
	// answer to the session on the same connection (monotonic reads of
	// its own row: a read may show a write still in flight, then a later
	// one lack it). The experiments whose sessions read only their own
	// row count it as their monotonic-reads violation (the engines
	// failover's went-backwards); the hot-row experiments report MR.
	OwnBackwards bool
	// AllWrites: the answer lacked a write acknowledged to some session
	// before the read was issued (read-all-writes, the guarantee of
	// router.PolicyGlobal): its own write (RYW) or a hot row below
	// Read.AckedHot.
	AllWrites bool
}

// sessionTruth is the checker's state for one session.
type sessionTruth struct {
	// seen[h] is the highest version of hot row h in any answer the session
	// has been given so far on connection conn (its monotonic-reads
	// watermark, in data).
	seen []int64
	conn uint32
	// own is the highest version of the session's own row in those
	// answers (meaningful once seen is not nil).
	own int64
}

// Checker judges reads against ground truth. It is not safe for concurrent
// use: each driver worker owns the sessions it checks, or calls are
// serialised by the caller.
type Checker struct {
	hot      int
	sessions []sessionTruth
}

// NewChecker returns a checker for sessions sessions and hot hot rows (0:
// the sessions read only their own rows).
func NewChecker(sessions, hot int) (*Checker, error) {
	if sessions < 1 {
		return nil, fmt.Errorf("lab: checker needs at least one session, got %d", sessions)
	}
	if hot < 0 {
		return nil, fmt.Errorf("lab: checker needs a hot row count of 0 or more, got %d", hot)
	}
	c := &Checker{hot: hot, sessions: make([]sessionTruth, sessions)}
	return c, nil
}

// Check judges r and, when it was served, raises the session's watermark.
// A read that was not served gets the zero Verdict: it showed the session
// nothing. It returns an error (and changes nothing) when r does not fit the
// checker (session out of range, wrong number of hot rows).
func (c *Checker) Check(r *Read) (Verdict, error) {
	if r.Session < 0 || r.Session >= len(c.sessions) {
		return Verdict{}, fmt.Errorf("lab: read of session %d, checker has %d sessions", r.Session, len(c.sessions))
	}
	if !r.Outcome.Served() {
		if r.ResetSeen {
			c.sessions[r.Session].seen = nil
		}
		if r.ResetSeen && r.ResetScope && r.Conn != 0 {
			for i := range c.sessions {
				if c.sessions[i].conn == r.Conn {
					c.sessions[i].seen = nil
				}
			}
		}
		return Verdict{}, nil
	}
	if len(r.Hot) != c.hot {
		return Verdict{}, fmt.Errorf("lab: read of session %d returned %d hot rows, want %d", r.Session, len(r.Hot), c.hot)
	}
	if r.AckedHot != nil && len(r.AckedHot) != c.hot {
		return Verdict{}, fmt.Errorf("lab: read of session %d carries %d acknowledged hot versions, want %d", r.Session, len(r.AckedHot), c.hot)
	}
	var v Verdict
	if r.Own < r.AckedSeq {
		v.RYW = true
	}
	v.AllWrites = v.RYW
	for h, floor := range r.AckedHot {
		if r.Hot[h] < floor {
			v.AllWrites = true
		}
	}
	st := &c.sessions[r.Session]
	if st.seen == nil {
		st.seen = make([]int64, c.hot)
		copy(st.seen, r.Hot)
		st.conn, st.own = r.Conn, r.Own
		return v, nil
	}
	if r.Conn != st.conn {
		// A new scope of the guarantee: judge the read against the old
		// watermark for the record, then start the new one from it.
		v.Reconnect = true
		for h, ver := range r.Hot {
			if ver < st.seen[h] {
				v.MRAcrossReconnect, v.MRRow = true, h
				break
			}
		}
		copy(st.seen, r.Hot)
		st.conn, st.own = r.Conn, r.Own
		return v, nil
	}
	if r.Own < st.own {
		v.OwnBackwards = true
	} else {
		st.own = r.Own
	}
	for h, ver := range r.Hot {
		if ver < st.seen[h] {
			if !v.MR {
				v.MR = true
				v.MRRow = h
			}
			continue
		}
		st.seen[h] = ver
	}
	return v, nil
}

// Tally counts reads and violations. The zero value is ready to use.
type Tally struct {
	// Reads is every read issued (served or not).
	Reads int64
	// ByOutcome counts reads by Outcome.
	ByOutcome [router.NumOutcomes]int64
	// Fallbacks counts freshness fallbacks to the primary.
	Fallbacks int64
	// Waited counts reads that waited for a replica.
	Waited int64
	// RYW and MR count violations among served reads; AllWrites the served
	// reads that lacked a write acknowledged to anyone before they began.
	RYW, MR, AllWrites int64
	// StaleRYW counts RYW violations among reads served labelled stale
	// (known to the router; included in RYW).
	StaleRYW int64
	// DeclaredLosses counts reads failed with a declared loss of what the
	// session had seen (Read.ResetSeen).
	DeclaredLosses int64
	// Reconnects counts served reads on another connection than their
	// session's previous served read (Verdict.Reconnect);
	// MRAcrossReconnect those that went back in time across it.
	Reconnects, MRAcrossReconnect int64
	// OwnBackwards counts served reads whose session's own row was older
	// than in an earlier read on the same connection (Verdict.
	// OwnBackwards: not in MR, which judges the hot rows).
	OwnBackwards int64
}

// Add counts one checked read.
func (t *Tally) Add(r *Read, v Verdict) {
	t.Reads++
	t.ByOutcome[r.Outcome]++
	if r.Outcome == router.OutFallback {
		t.Fallbacks++
	}
	if r.Waited {
		t.Waited++
	}
	if v.RYW {
		t.RYW++
		if r.Outcome == router.OutStale {
			t.StaleRYW++
		}
	}
	if v.MR {
		t.MR++
	}
	if v.AllWrites {
		t.AllWrites++
	}
	if r.ResetSeen {
		t.DeclaredLosses++
	}
	if v.Reconnect {
		t.Reconnects++
	}
	if v.MRAcrossReconnect {
		t.MRAcrossReconnect++
	}
	if v.OwnBackwards {
		t.OwnBackwards++
	}
}

// Merge adds o into t.
func (t *Tally) Merge(o *Tally) {
	t.Reads += o.Reads
	for i := range t.ByOutcome {
		t.ByOutcome[i] += o.ByOutcome[i]
	}
	t.Fallbacks += o.Fallbacks
	t.Waited += o.Waited
	t.RYW += o.RYW
	t.MR += o.MR
	t.AllWrites += o.AllWrites
	t.StaleRYW += o.StaleRYW
	t.DeclaredLosses += o.DeclaredLosses
	t.Reconnects += o.Reconnects
	t.MRAcrossReconnect += o.MRAcrossReconnect
}

// Served is the number of reads that returned rows.
func (t *Tally) Served() int64 {
	var n int64
	for o, c := range t.ByOutcome {
		if router.Outcome(o).Served() {
			n += c
		}
	}
	return n
}

// Accounted reports whether every read has exactly one outcome.
func (t *Tally) Accounted() bool {
	var n int64
	for _, c := range t.ByOutcome {
		n += c
	}
	return n == t.Reads
}
