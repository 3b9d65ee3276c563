package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/causallab/causallab/router"
)

// HistoryOp is one operation of a run as the driver saw it (Config.
// RecordHistory, Result.History): what was invoked and when, what came
// back and when. Times are since the start of the run.
type HistoryOp struct {
	// Run is the group of routers measured at once the operation belongs
	// to (one per router under Sequential mode): each starts from a fresh
	// schema, its hot rows at version 0.
	Run int
	// Router names the router that ran it; Session is the lab session.
	Router  string
	Session int
	// Write: a write, else a read.
	Write bool
	// Invoke and Complete bound the operation in time.
	Invoke, Complete time.Duration
	// A write's hot row (-1: none, in an experiment whose sessions read
	// only their own rows), the version it gave it (0: unknown, the
	// write's outcome is not known) and its GTID.
	Hot     int
	Version int64
	GTID    string
	// A write's number within its session (the own row's new value), and
	// whether it failed (its outcome is then not known).
	Seq        int64
	WriteError bool
	// A read's outcome, node, and, when served, the versions it returned:
	// its session's own row (Own) and every hot row (Hot[i]); AckedSeq,
	// Conn and ResetSeen as in Read (what the checker judged it by).
	Outcome   router.Outcome
	Node      string
	Own       int64
	HotRead   []int64
	AckedSeq  int64
	Conn      uint32
	ResetSeen bool
}

// recordOp appends the completed operation o, of router r, to the
// driver's history (Config.RecordHistory), at completion time now.
func (e *driver) recordOp(o *op, r string, now time.Duration) {
	h := HistoryOp{Router: r, Session: o.sess, Write: o.write, Invoke: o.started, Complete: now}
	if o.write {
		h.Hot, h.Version, h.GTID, h.Seq, h.WriteError = o.hot, o.ack.Hot, o.ack.GTID, o.seq, o.err != nil
		if h.Version <= 0 {
			h.Version = 0 // the outcome is not known
		}
	} else {
		h.Invoke, h.Complete = o.read.Issued, o.read.Done
		h.Outcome, h.Node, h.Own = o.read.Outcome, o.read.Node, o.read.Own
		h.AckedSeq, h.Conn, h.ResetSeen = o.read.AckedSeq, o.read.Conn, o.read.ResetSeen
		if o.read.Outcome.Served() {
			h.HotRead = append([]int64(nil), o.read.Hot...)
		}
	}
	e.history = append(e.history, h)
}

// History files (`--history DIR`, WriteHistory): the run's operations
// for anyone's checker, in two forms.
//
// JSON lines (history-<experiment>.jsonl): one HistoryJSON per line, in the
// order the driver completed them (the order lab.Checker judged them).
//
// Elle's rw-register EDN (history-<experiment>.edn): per operation an
// :invoke and its completion (:ok; a failed read :fail; a failed write,
// whose outcome is not known, :info), :process the lab session, :router
// the router, :f :txn. Keys: hot row h is h; session s's own row is
// hotRows + s, a key only that session writes. A write is [[:w own seq]
// [:w hot version]] (its seq is the own row's new value: the session's
// writes are numbered 1, 2, ...; a write of unknown outcome, :info,
// without the hot row's unknown version); a read [[:r own v] [:r 0 v0]
// ...].
// docs/lab-checks.md, "Histories", maps each causallab count to Elle's anomaly.

// HistoryJSON is one line of the JSON-lines history.
type HistoryJSON struct {
	Index      int     `json:"index"`
	Run        int     `json:"run"`
	Router     string  `json:"router"`
	Session    int     `json:"session"`
	Type       string  `json:"type"` // write or read
	InvokeNs   int64   `json:"invoke_ns"`
	CompleteNs int64   `json:"complete_ns"`
	Seq        int64   `json:"seq,omitempty"`      // write: the session's write number
	Hot        int     `json:"hot"`                // write: its hot row
	Version    int64   `json:"version,omitempty"`  // write: the version it gave the hot row (0: unknown)
	GTID       string  `json:"gtid,omitempty"`     // write
	AckedSeq   int64   `json:"acked_seq"`          // read: the session's last acknowledged write when issued
	Outcome    string  `json:"outcome,omitempty"`  // read
	Node       string  `json:"node,omitempty"`     // read
	Conn       uint32  `json:"conn,omitempty"`     // read: the monotonic-reads scope (Read.Conn)
	Own        int64   `json:"own,omitempty"`      // read: its own row's version
	HotRead    []int64 `json:"hot_read,omitempty"` // read: every hot row's version (served)
	ResetSeen  bool    `json:"reset_seen,omitempty"`
	WriteError bool    `json:"write_error,omitempty"`
}

// toJSON is o as line i of the JSON-lines history.
func (o *HistoryOp) toJSON(i int) HistoryJSON {
	j := HistoryJSON{Index: i, Run: o.Run, Router: o.Router, Session: o.Session, Type: "read",
		InvokeNs: int64(o.Invoke), CompleteNs: int64(o.Complete)}
	if o.Write {
		j.Type, j.Seq, j.Hot, j.Version, j.GTID, j.WriteError = "write", o.Seq, o.Hot, o.Version, o.GTID, o.WriteError
		return j
	}
	j.AckedSeq, j.Outcome, j.Node, j.Conn, j.Own, j.HotRead, j.ResetSeen = o.AckedSeq, o.Outcome.String(), o.Node, o.Conn, o.Own, o.HotRead, o.ResetSeen
	return j
}

// WriteHistoryJSON writes h as JSON lines, one operation a line.
func WriteHistoryJSON(w io.Writer, h []HistoryOp) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range h {
		if err := enc.Encode(h[i].toJSON(i)); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ednEvent is one line of the EDN history: an operation's invocation or
// completion, at time t.
type ednEvent struct {
	t       time.Duration
	op      int
	invoke  bool
	process int
}

// WriteHistoryEDN writes h as Elle's rw-register history (the comment
// before HistoryJSON says how). A session's operation invoked while
// another of its own is still running (a write due during its read) is
// given process sessions + session: Elle's processes run one operation
// at a time.
func WriteHistoryEDN(w io.Writer, h []HistoryOp, sessions, hotRows int) error {
	events := make([]ednEvent, 0, 2*len(h))
	for i := range h {
		events = append(events, ednEvent{t: h[i].Invoke, op: i, invoke: true}, ednEvent{t: h[i].Complete, op: i})
	}
	sort.SliceStable(events, func(a, b int) bool {
		if events[a].t != events[b].t {
			return events[a].t < events[b].t
		}
		return events[a].invoke && !events[b].invoke // an op's invoke before its own completion
	})
	busy := map[int]bool{}
	proc := make([]int, len(h))
	bw := bufio.NewWriter(w)
	for idx, e := range events {
		o := &h[e.op]
		if e.invoke {
			p := o.Session
			if busy[p] {
				p = sessions + o.Session
			}
			busy[p], proc[e.op] = true, p
		} else {
			busy[proc[e.op]] = false
		}
		fmt.Fprintf(bw, "{:index %d, :time %d, :type %s, :process %d, :router %q, :run %d, :f :txn, :value %s}\n",
			idx, int64(e.t), ednType(o, e.invoke), proc[e.op], o.Router, o.Run, ednValue(o, e.invoke, hotRows))
	}
	return bw.Flush()
}

// ednType is an event's :type.
func ednType(o *HistoryOp, invoke bool) string {
	switch {
	case invoke:
		return ":invoke"
	case o.Write && (o.WriteError || o.Hot >= 0 && o.Version == 0):
		return ":info" // its outcome is not known
	case !o.Write && !o.Outcome.Served():
		return ":fail"
	}
	return ":ok"
}

// ednValue is an event's :value: a write's two micro-operations, a read's
// one per row (values nil at the invocation, and in a failed read).
func ednValue(o *HistoryOp, invoke bool, hotRows int) string {
	var b strings.Builder
	b.WriteByte('[')
	own := hotRows + o.Session
	if o.Write {
		// A hot row's write of unknown version is left out: Elle's
		// writes carry unique values.
		fmt.Fprintf(&b, "[:w %d %d]", own, o.Seq)
		if o.Version > 0 {
			fmt.Fprintf(&b, " [:w %d %d]", o.Hot, o.Version)
		}
		b.WriteByte(']')
		return b.String()
	}
	seen := !invoke && o.Outcome.Served()
	if seen {
		fmt.Fprintf(&b, "[:r %d %d]", own, o.Own)
	} else {
		fmt.Fprintf(&b, "[:r %d nil]", own)
	}
	for hot := range hotRows {
		if seen {
			fmt.Fprintf(&b, " [:r %d %d]", hot, o.HotRead[hot])
		} else {
			fmt.Fprintf(&b, " [:r %d nil]", hot)
		}
	}
	b.WriteByte(']')
	return b.String()
}

// WriteHistory writes each result's history into dir as
// history-<experiment>[-<i>].jsonl and .edn (i: the result's index, when
// there are several).
func WriteHistory(dir string, results []*Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, r := range results {
		name := r.Experiment
		if len(results) > 1 {
			name += "-" + strconv.Itoa(i)
		}
		if err := WriteHistoryFiles(dir, name, r.History, r.Config.Sessions, r.Config.HotRows); err != nil {
			return err
		}
	}
	return nil
}

// WriteHistoryFiles writes history h of an experiment called name into
// dir as history-<name>.jsonl and .edn (sessions and hotRows as
// WriteHistoryEDN takes them): every experiment's history, in one form.
func WriteHistoryFiles(dir, name string, h []HistoryOp, sessions, hotRows int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, "history-"+name)
	if err := writeFile(base+".jsonl", func(w io.Writer) error { return WriteHistoryJSON(w, h) }); err != nil {
		return err
	}
	return writeFile(base+".edn", func(w io.Writer) error { return WriteHistoryEDN(w, h, sessions, hotRows) })
}

// writeFile creates path and writes it with fill.
func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("lab: %s: %w", path, err)
	}
	return f.Close()
}
