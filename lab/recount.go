package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/causallab/causallab/router"
)

// RecountRow is what Recount finds for one router.
type RecountRow struct {
	// Reads, and Served of them.
	Reads, Served int64
	// RYW, MR and OwnBackwards count the Checker's verdicts
	// (Verdict.RYW, Verdict.MR, Verdict.OwnBackwards).
	RYW, MR, OwnBackwards int64
}

// Recount judges a JSON-lines history (WriteHistoryJSON) with a fresh
// Checker for sessions sessions and hotRows hot rows, in the file's order,
// from the file alone, and returns each router's counts: what anyone can
// recompute from an exported history (docs/lab-checks.md, "Histories").
func Recount(r io.Reader, sessions, hotRows int) (map[string]RecountRow, error) {
	chk, err := NewChecker(sessions, hotRows)
	if err != nil {
		return nil, err
	}
	out := map[string]RecountRow{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var j HistoryJSON
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			return nil, fmt.Errorf("lab: history line %d: %w", line, err)
		}
		if j.Type != "read" {
			continue
		}
		o, ok := outcomeNamed(j.Outcome)
		if !ok {
			return nil, fmt.Errorf("lab: history line %d: unknown outcome %q", line, j.Outcome)
		}
		v, err := chk.Check(&Read{Session: j.Session, AckedSeq: j.AckedSeq, Own: j.Own, Hot: j.HotRead, Outcome: o, Conn: j.Conn, ResetSeen: j.ResetSeen})
		if err != nil {
			return nil, fmt.Errorf("lab: history line %d: %w", line, err)
		}
		c := out[j.Router]
		c.Reads++
		if o.Served() {
			c.Served++
		}
		c.RYW += b2i(v.RYW)
		c.MR += b2i(v.MR)
		c.OwnBackwards += b2i(v.OwnBackwards)
		out[j.Router] = c
	}
	return out, sc.Err()
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// outcomeNamed is the router.Outcome named name.
func outcomeNamed(name string) (router.Outcome, bool) {
	for _, o := range router.Outcomes() {
		if o.String() == name {
			return o, true
		}
	}
	return 0, false
}
