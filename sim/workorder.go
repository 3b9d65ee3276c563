package sim

import (
	"context"
	"fmt"
	"math"
	"sort"
)

// The request-stream model of the `workorder` experiment, exactly as the
// specification gives it: a second, simpler workload with a fixed lag and no
// event queue.

// WorkorderSeed is the Park–Miller generator's default seed.
const WorkorderSeed = 20260802

const pmModulus = 1<<31 - 1

// parkMiller is the minimal standard generator with multiplier 48271.
type parkMiller struct{ state uint64 }

// next returns the new state divided by 2^31−1, in (0, 1).
func (p *parkMiller) next() float64 {
	p.state = p.state * 48271 % pmModulus
	return float64(p.state) / pmModulus
}

// WorkorderModel is the request-stream model's parameters.
type WorkorderModel struct {
	// Seed of the Park–Miller generator, 1..2^31−2. Default WorkorderSeed.
	Seed uint64
	// Seconds of requests (300), RequestsPerSec (1400), WriteShare (0.22).
	Seconds, RequestsPerSec, WriteShare float64
	// Sessions (2400) and Records (50000).
	Sessions, Records int
	// ReadBackShare (0.31) of writes are read back by their session after a
	// delay uniform in [ReadBackMin, ReadBackMax] seconds (0.12, 0.9).
	ReadBackShare, ReadBackMin, ReadBackMax float64
}

func (m *WorkorderModel) validate() error {
	if m.Seed == 0 {
		m.Seed = WorkorderSeed
	}
	def := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	def(&m.Seconds, 300)
	def(&m.RequestsPerSec, 1400)
	def(&m.WriteShare, 0.22)
	def(&m.ReadBackShare, 0.31)
	def(&m.ReadBackMin, 0.12)
	def(&m.ReadBackMax, 0.9)
	if m.Sessions == 0 {
		m.Sessions = 2400
	}
	if m.Records == 0 {
		m.Records = 50000
	}
	switch {
	case m.Seed >= pmModulus:
		return fmt.Errorf("sim: workorder seed %d: want 1..%d", m.Seed, pmModulus-1)
	case m.Seconds <= 0 || m.RequestsPerSec <= 0 || m.Seconds*m.RequestsPerSec > 1e8:
		return fmt.Errorf("sim: workorder %g s at %g requests/s: want a positive total up to 1e8", m.Seconds, m.RequestsPerSec)
	case m.WriteShare < 0 || m.WriteShare > 1 || m.ReadBackShare < 0 || m.ReadBackShare > 1:
		return fmt.Errorf("sim: workorder shares must lie in [0, 1]")
	case m.Sessions < 1 || m.Records < 1:
		return fmt.Errorf("sim: workorder needs at least one session and one record")
	case m.ReadBackMin < 0 || m.ReadBackMax < m.ReadBackMin:
		return fmt.Errorf("sim: workorder read-back delay [%g, %g]: want 0 <= min <= max", m.ReadBackMin, m.ReadBackMax)
	}
	return nil
}

type woEvent struct {
	t       float64
	session int32
	record  int32
	write   bool
}

// WorkorderStream is the drawn stream, evaluated once: per read, the age of
// its record's last write and the time since the reader's own last write.
type WorkorderStream struct {
	Model  WorkorderModel
	Writes int
	// ReadBacks is the number of writes read back by their own session.
	ReadBacks int
	// RecordAge[i] is read i's lag-to-staleness: the time since the last
	// write to its record (+Inf: never written, never stale).
	RecordAge []float64
	// OwnWriter[i] is true when the reader wrote the record last.
	OwnWriter []bool
	// SinceOwnWrite[i] is the time since the reader's own last write (+Inf:
	// none).
	SinceOwnWrite []float64
}

// DrawWorkorder draws the request stream: writes first (time, session,
// record, read-back coin, then the delay if the coin came up), then the
// remaining reads (time, session, record), then a stable sort by time.
func DrawWorkorder(m WorkorderModel) (*WorkorderStream, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	pm := parkMiller{state: m.Seed}
	total := int(math.Round(m.Seconds * m.RequestsPerSec))
	nw := int(math.Round(float64(total) * m.WriteShare))
	ev := make([]woEvent, 0, total)
	readBacks := 0
	for range nw {
		t := pm.next() * m.Seconds
		s := int32(pm.next() * float64(m.Sessions))
		r := int32(pm.next() * float64(m.Records))
		ev = append(ev, woEvent{t: t, session: s, record: r, write: true})
		if pm.next() < m.ReadBackShare {
			d := m.ReadBackMin + pm.next()*(m.ReadBackMax-m.ReadBackMin)
			ev = append(ev, woEvent{t: t + d, session: s, record: r})
			readBacks++
		}
	}
	for len(ev) < total {
		t := pm.next() * m.Seconds
		s := int32(pm.next() * float64(m.Sessions))
		r := int32(pm.next() * float64(m.Records))
		ev = append(ev, woEvent{t: t, session: s, record: r})
	}
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].t < ev[j].t })

	st := &WorkorderStream{Model: m, Writes: nw, ReadBacks: readBacks}
	lastW := make([]float64, m.Records)
	lastBy := make([]int32, m.Records)
	own := make([]float64, m.Sessions)
	for i := range lastW {
		lastW[i], lastBy[i] = math.Inf(-1), -1
	}
	for i := range own {
		own[i] = math.Inf(-1)
	}
	for _, e := range ev {
		if e.write {
			lastW[e.record], lastBy[e.record] = e.t, e.session
			own[e.session] = e.t
			continue
		}
		st.RecordAge = append(st.RecordAge, e.t-lastW[e.record])
		st.OwnWriter = append(st.OwnWriter, lastBy[e.record] == e.session)
		st.SinceOwnWrite = append(st.SinceOwnWrite, e.t-own[e.session])
	}
	return st, nil
}

// count returns reads stale at lag l, RYW misses at l, reads routed to the
// primary under window w, and RYW misses so routed (saved).
func (s *WorkorderStream) count(l, w float64) (stale, miss, routed, saved int) {
	for i, age := range s.RecordAge {
		isStale := age < l
		isMiss := isStale && s.OwnWriter[i]
		isRouted := s.SinceOwnWrite[i] < w
		if isStale {
			stale++
		}
		if isMiss {
			miss++
		}
		if isRouted {
			routed++
			if isMiss {
				saved++
			}
		}
	}
	return
}

// Workorder is the `workorder` experiment. Options.Base.Seed, when set,
// seeds the generator instead of WorkorderSeed.
func Workorder(_ context.Context, o Options) (*Report, error) {
	m := WorkorderModel{Seed: o.Base.Seed}
	st, err := DrawWorkorder(m)
	if err != nil {
		return nil, err
	}
	m = st.Model
	reads := len(st.RecordAge)
	note := fmt.Sprintf("Park–Miller seed %d: %g s at %g requests/s, %d writes, %d reads, %d sessions, %d records; %.0f%% of writes read back %g–%g s later.",
		m.Seed, m.Seconds, m.RequestsPerSec, st.Writes, reads, m.Sessions, m.Records, 100*m.ReadBackShare, m.ReadBackMin, m.ReadBackMax)

	t0 := &Table{Name: "workorder-stream", Title: "Request stream: totals", Columns: []Column{
		{"seed", "Park–Miller seed", 0}, {"seconds", "seconds", 0}, {"requests_per_sec", "requests/s", 0},
		{"requests", "requests", 0}, {"writes", "writes", 0}, {"reads", "reads", 0}, {"read_backs", "read-backs", 0},
		{"sessions", "sessions", 0}, {"records", "records", 0}}}
	t0.Rows = [][]Cell{{N(float64(m.Seed)), N(m.Seconds), N(m.RequestsPerSec), N(float64(st.Writes + reads)), N(float64(st.Writes)),
		N(float64(reads)), N(float64(st.ReadBacks)), N(float64(m.Sessions)), N(float64(m.Records))}}
	t0.Notes = []string{note}

	t1 := &Table{Name: "workorder-lag", Title: "Request stream: stale reads and RYW misses at a fixed replica lag", Columns: []Column{
		{"lag_s", "lag L s", 2}, {"stale_reads", "stale reads", 0}, {"stale_pct", "stale %", 3},
		{"ryw_misses", "RYW misses", 0}, {"ryw_miss_pct", "RYW miss %", 3}}}
	for _, l := range []float64{0.1, 0.25, 0.5, 1, 2, 5} {
		stale, miss, _, _ := st.count(l, 0)
		t1.Rows = append(t1.Rows, []Cell{N(l), N(float64(stale)), N(100 * float64(stale) / float64(reads)),
			N(float64(miss)), N(100 * float64(miss) / float64(reads))})
	}
	t1.Notes = []string{note, "All reads go to replicas here; the lag is fixed (the calibrated lag of the event model does not apply)."}

	const lFix = 0.55
	t2 := &Table{Name: "workorder-window", Title: "Request stream: the session window at L = 0.55 s", Columns: []Column{
		{"window_s", "W s", 2}, {"primary_reads", "reads to primary", 0}, {"primary_pct", "primary %", 2},
		{"misses_saved", "misses saved", 0}, {"misses_remaining", "misses remaining", 0}}}
	for _, w := range []float64{0, 0.25, 0.5, 1, 2, 5, 15} {
		_, miss, routed, saved := st.count(lFix, w)
		t2.Rows = append(t2.Rows, []Cell{N(w), N(float64(routed)), N(100 * float64(routed) / float64(reads)),
			N(float64(saved)), N(float64(miss - saved))})
	}
	t2.Notes = []string{note, "Routed: the reader's own last write is less than W s before the read."}

	t3 := &Table{Name: "workorder-replicas", Title: "Request stream: replica count when lag grows with the fleet (W = 1 s)", Columns: []Column{
		{"replicas", "replicas", 0}, {"lag_s", "lag s", 2}, {"reads_per_replica_per_sec", "reads/s per replica", 1},
		{"marginal_gain", "marginal gain r/s", 1}, {"stale_share_pct", "stale share %", 3}, {"primary_load_units", "primary load units", 1}}}
	readsPS := float64(reads) / m.Seconds
	writesPS := float64(st.Writes) / m.Seconds
	prev := math.NaN()
	for r := 1; r <= 8; r++ {
		l := 0.25 + 0.15*float64(r)
		stale, _, routed, _ := st.count(l, 1)
		primPS := float64(routed) / m.Seconds
		per := (readsPS - primPS) / float64(r)
		gain := prev - per
		prev = per
		t3.Rows = append(t3.Rows, []Cell{N(float64(r)), N(l), N(per), N(gain), N(100 * float64(stale) / float64(reads)),
			N(writesPS*1.0 + primPS*0.4 + float64(r)*writesPS*0.08)})
	}
	t3.Notes = []string{note, "Lag = 0.25 s + 0.15 s per replica. Stale share: the share of all reads that are stale at that fleet's lag, with no routing (5 replicas at 1.00 s give the lag table's 1.00 s row). " +
		"Primary load units = writes/s × 1.0 + primary reads/s × 0.4 + R × writes/s × 0.08. Marginal gain of the first replica is n/a."}
	return &Report{Tables: []*Table{t0, t1, t2, t3}}, nil
}
