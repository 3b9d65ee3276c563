package hashroute

// Explanation is the step-by-step account of one selection, for people (the
// `causallab hash explain` command) and tests. Building one allocates; use
// Select on hot paths. Explain always agrees with Select.
type Explanation struct {
	// Mode is the selection mode.
	Mode Mode `json:"mode"`
	// Hash is the id's hash.
	Hash uint64 `json:"hash"`
	// First is the id's first choice in the full configured list.
	First int `json:"first"`
	// FirstUp reports whether the first choice is up.
	FirstUp bool `json:"first_up"`
	// Probes lists the servers visited by the reselection probe sequence
	// (full-list and rebalance-override when the first choice is down), the
	// last one being the up server taken. Empty otherwise.
	Probes []int `json:"probes,omitempty"`
	// Hashed is the server chosen before any rebalancing (-1 if none up).
	Hashed int `json:"hashed"`
	// InflightShare and WeightShare are the hashed server's share of the
	// in-flight work and of the up servers' weight (rebalance-override only).
	InflightShare float64 `json:"inflight_share,omitempty"`
	WeightShare   float64 `json:"weight_share,omitempty"`
	// Overloaded reports whether the rebalancer judged the hashed server
	// overloaded (rebalance-override only).
	Overloaded bool `json:"overloaded,omitempty"`
	// Index is the final server (-1 if none up) and Reason why.
	Index  int    `json:"index"`
	Reason Reason `json:"reason"`
}

// Explain selects like Select and records how.
func (t *Table) Explain(h uint64, mode Mode, up Availability, inflight []int) Explanation {
	up &= t.all
	e := Explanation{Mode: mode, Hash: h, First: t.First(h), Hashed: -1}
	e.FirstUp = up.Up(e.First)
	e.Index, e.Reason = t.Select(h, mode, up, inflight)
	switch mode {
	case AvailableOnly:
		e.Hashed = e.Index
		return e
	case RebalanceOverride:
		e.Hashed, _ = t.fullList(h, up)
	default:
		e.Hashed = e.Index
	}
	if !e.FirstUp && up != 0 {
		for p := uint64(1); p <= MaxProbes; p++ {
			i := t.probe(h, p)
			e.Probes = append(e.Probes, i)
			if up.Up(i) {
				break
			}
		}
	}
	if mode == RebalanceOverride && e.Hashed >= 0 {
		var upW uint64
		var total int
		for i := 0; i < t.Len(); i++ {
			if up.Up(i) {
				upW += t.weights[i]
				total += count(inflight, i)
			}
		}
		if total > 0 {
			e.InflightShare = float64(count(inflight, e.Hashed)) / float64(total)
		}
		e.WeightShare = float64(t.weights[e.Hashed]) / float64(upW)
		e.Overloaded = t.overloaded(e.Hashed, inflight, up)
	}
	return e
}

// RemapStats counts how a set of ids moves between two availabilities (and
// in-flight loads) under one mode.
type RemapStats struct {
	// Mode is the selection mode.
	Mode Mode `json:"mode"`
	// IDs is the number of ids compared.
	IDs int `json:"ids"`
	// Moved is the number of ids whose server differs between before and after.
	Moved int `json:"moved"`
	// OnDowned is the number of ids whose server before went down in after:
	// these must move under any mode.
	OnDowned int `json:"on_downed"`
	// MovedNeedlessly is the number of ids that moved although their server
	// before is still up after: the monotonic-reads hazard.
	MovedNeedlessly int `json:"moved_needlessly"`
}

// Remap compares where each id hash goes under before/inflightBefore and
// after/inflightAfter.
func (t *Table) Remap(hashes []uint64, mode Mode, before, after Availability, inflightBefore, inflightAfter []int) RemapStats {
	st := RemapStats{Mode: mode, IDs: len(hashes)}
	after &= t.all
	for _, h := range hashes {
		b, _ := t.Select(h, mode, before, inflightBefore)
		a, _ := t.Select(h, mode, after, inflightAfter)
		if a == b {
			continue
		}
		st.Moved++
		if b >= 0 && !after.Up(b) {
			st.OnDowned++
		} else {
			st.MovedNeedlessly++
		}
	}
	return st
}
