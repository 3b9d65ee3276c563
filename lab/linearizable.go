package lab

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability of each hot row, checked with porcupine: what the
// `global` router promises for the rows every session writes (every read
// shows every write acknowledged before it was issued, and nothing that
// was not written) is that a row's reads and writes are linearizable as a
// register. A write sets the version it reports (WriteAck.Hot: the hot
// row's new version, LAST_INSERT_ID(version + 1)); a read returns the
// version it saw. Every write of a run counts, whichever router's session
// made it (they all go to the primary); the reads are one router's.

// HotVerdict is CheckLinearizable's verdict on one hot row of one run.
type HotVerdict struct {
	Run, Hot int
	// Result is porcupine's: ok, illegal (no linearization exists), or
	// unknown (the check ran out of time); or unchecked (Why says why).
	Result string
	Why    string
	// Writes and Reads are the operations checked.
	Writes, Reads int
}

// The verdicts' Result values.
const (
	LinOK        = "ok"
	LinIllegal   = "illegal"
	LinUnknown   = "unknown"
	LinUnchecked = "unchecked"
)

// regInput is a register operation's input: a write of version v, or a
// read.
type regInput struct {
	write bool
	v     int64
}

// hotRegister is porcupine's model of one hot row: its version, 0 at the
// start of a run (the schema is created afresh).
var hotRegister = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, in.v
		}
		return output.(int64) == state.(int64), state
	},
	DescribeOperation: func(input, output any) string {
		if in := input.(regInput); in.write {
			return fmt.Sprintf("write %d", in.v)
		}
		return fmt.Sprintf("read %d", output.(int64))
	},
}

// CheckLinearizable checks every hot row of every run in h: all its
// writes with the named router's served reads, each row within timeout.
// A row with a write of unknown outcome (no version: it failed or timed
// out) whose version some read may have returned is left unchecked: its
// version is not known.
func CheckLinearizable(h []HistoryOp, routerName string, hotRows int, timeout time.Duration) []HotVerdict {
	type key struct{ run, hot int }
	ops := map[key][]porcupine.Operation{}
	known := map[key]map[int64]bool{}
	unknown := map[key]int{}
	var runs []int
	for _, o := range h {
		if !slices.Contains(runs, o.Run) {
			runs = append(runs, o.Run)
		}
		if !o.Write {
			continue
		}
		k := key{o.Run, o.Hot}
		if o.Version == 0 {
			unknown[k]++
			continue
		}
		if known[k] == nil {
			known[k] = map[int64]bool{}
		}
		known[k][o.Version] = true
		ops[k] = append(ops[k], porcupine.Operation{ClientId: o.Session, Input: regInput{write: true, v: o.Version},
			Call: int64(o.Invoke), Output: int64(0), Return: int64(o.Complete)})
	}
	unseen := map[key]bool{} // a read returned a version no known write gave
	for _, o := range h {
		if o.Write || o.Router != routerName || o.HotRead == nil {
			continue
		}
		for hot, v := range o.HotRead {
			k := key{o.Run, hot}
			if v != 0 && !known[k][v] {
				unseen[k] = true
			}
			ops[k] = append(ops[k], porcupine.Operation{ClientId: o.Session, Input: regInput{},
				Call: int64(o.Invoke), Output: v, Return: int64(o.Complete)})
		}
	}
	slices.Sort(runs)
	var out []HotVerdict
	for _, run := range runs {
		for hot := range hotRows {
			k := key{run, hot}
			v := HotVerdict{Run: run, Hot: hot}
			for _, op := range ops[k] {
				if op.Input.(regInput).write {
					v.Writes++
				} else {
					v.Reads++
				}
			}
			switch {
			case unseen[k] && unknown[k] > 0:
				v.Result, v.Why = LinUnchecked, fmt.Sprintf("%d writes of unknown outcome, and a read returned a version no known write gave", unknown[k])
			default:
				v.Result = checkRow(ops[k], timeout)
			}
			out = append(out, v)
		}
	}
	return out
}

// checkRow runs porcupine on one row's operations.
func checkRow(ops []porcupine.Operation, timeout time.Duration) string {
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	switch porcupine.CheckOperationsTimeout(hotRegister, ops, timeout) {
	case porcupine.Ok:
		return LinOK
	case porcupine.Illegal:
		return LinIllegal
	}
	return LinUnknown
}
