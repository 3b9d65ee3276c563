package sim

// TraceRead is one read of a traced trial.
type TraceRead struct {
	// At is when the read reached its node, in ms since trial start.
	At float64
	// Node is the serving replica, or -1 for the primary.
	Node int
	// Missed is true when the read did not see the session's own last write.
	Missed bool
}

// Trace records one trial in detail for the strip picture: every read, and
// the replica lag over time.
type Trace struct {
	// DurationMs is the span of the offered writes (Config.Duration); reads
	// that follow it are in Reads too.
	DurationMs float64
	// Straggler is true when replica 0 is the world's straggler.
	Straggler bool
	// Reads in the order they reached their nodes.
	Reads []TraceRead
	// LagMs[b] is the largest commit-to-apply lag (ms) over every replica of
	// the records committed in 100 ms bin b.
	LagMs []float64
	// MeanLagMs[b] is the mean over replicas and records of bin b.
	MeanLagMs []float64
	lagN      []int
}

func (tr *Trace) lag(commit usec, _ int, lag usec) {
	b := int(commit / binWidth)
	for len(tr.LagMs) <= b {
		tr.LagMs = append(tr.LagMs, 0)
		tr.MeanLagMs = append(tr.MeanLagMs, 0)
		tr.lagN = append(tr.lagN, 0)
	}
	ms := float64(lag) / 1000
	tr.LagMs[b] = max(tr.LagMs[b], ms)
	tr.lagN[b]++
	tr.MeanLagMs[b] += (ms - tr.MeanLagMs[b]) / float64(tr.lagN[b])
}

func (tr *Trace) read(t usec, node int32, obs, token LogPos) {
	tr.Reads = append(tr.Reads, TraceRead{At: float64(t) / 1000, Node: int(node), Missed: obs < token})
}
