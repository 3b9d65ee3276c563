package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/causallab/causallab/router"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/history-sample.* from the sample history")

// sampleHistory is a small run: two sessions, two hot rows, a write and
// reads of each, a failed read, a write of unknown outcome, and a write
// due during its session's read.
func sampleHistory() []HistoryOp {
	return []HistoryOp{
		{Router: "token-ryw-mr", Session: 0, Write: true, Invoke: msec(1), Complete: msec(3), Seq: 1, Hot: 1, Version: 1, GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1"},
		{Router: "token-ryw-mr", Session: 0, Invoke: msec(4), Complete: msec(9), Outcome: router.OutReplica, Node: "replica1", Own: 1, HotRead: []int64{0, 1}, AckedSeq: 1},
		{Router: "any", Session: 1, Invoke: msec(5), Complete: msec(6), Outcome: router.OutReplica, Node: "replica2", Own: 0, HotRead: []int64{0, 0}},
		{Router: "token-ryw-mr", Session: 0, Write: true, Invoke: msec(7), Complete: msec(8), Seq: 2, Hot: 0, Version: 1, GTID: "3e11fa47-71ca-11e1-9e33-c80aa9429562:2"},
		{Router: "any", Session: 1, Write: true, Invoke: msec(10), Complete: msec(2010), Seq: 1, Hot: 0, WriteError: true},
		{Router: "any", Session: 1, Invoke: msec(2011), Complete: msec(2013), Outcome: router.OutError},
	}
}

// TestHistorySample: the sample history's two files are as recorded in
// testdata (go test -run TestHistorySample -update ./lab/ rewrites them),
// and both pass the strict checks.
func TestHistorySample(t *testing.T) {
	var js, edn bytes.Buffer
	h := sampleHistory()
	if err := WriteHistoryJSON(&js, h); err != nil {
		t.Fatal(err)
	}
	if err := WriteHistoryEDN(&edn, h, 2, 2); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{"testdata/history-sample.jsonl": js.Bytes(), "testdata/history-sample.edn": edn.Bytes()} {
		if *updateGolden {
			if err := os.WriteFile(name, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the sample history writes\n%s\nwant\n%s", name, got, want)
		}
	}
	checkEDN(t, edn.Bytes(), len(h))
	// The write due during session 0's read runs as process 2 + 0.
	if !bytes.Contains(edn.Bytes(), []byte(":type :invoke, :process 2, ")) {
		t.Errorf("a session's write during its read is not given its second process:\n%s", edn.Bytes())
	}
}

// ednLine is the strict form of one EDN history line.
var ednLine = regexp.MustCompile(`^\{:index (\d+), :time \d+, :type :(invoke|ok|fail|info), :process (\d+), :router "[^"\\]*", :run \d+, :f :txn, :value \[\[:[rw] \d+ (\d+|nil)\]( \[:[rw] \d+ (\d+|nil)\])*\]\}$`)

// checkEDN checks the EDN history strictly: every line a map of the form
// above, indexes 0, 1, 2, ..., each process alternating an invocation
// and its completion, ops invocations and as many completions.
func checkEDN(t *testing.T, b []byte, ops int) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	open := map[string]bool{}
	n, invokes := 0, 0
	for sc.Scan() {
		m := ednLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("EDN line %d is not of the strict form: %q", n, sc.Text())
		}
		if m[1] != fmt.Sprint(n) {
			t.Fatalf("EDN line %d has :index %s", n, m[1])
		}
		proc := m[3]
		if invoke := m[2] == "invoke"; invoke == open[proc] {
			t.Fatalf("EDN line %d: process %s %s twice in a row", n, proc, m[2])
		} else if invoke {
			invokes++
		}
		open[proc] = m[2] == "invoke"
		n++
	}
	if n != 2*ops || invokes != ops {
		t.Fatalf("EDN: %d lines, %d invocations, want %d and %d", n, invokes, 2*ops, ops)
	}
}

// recount runs a fresh Checker over a JSON-lines history alone and
// returns each router's RYW and MR counts.
func recount(t *testing.T, b []byte, sessions, hot int) map[string][2]int64 {
	t.Helper()
	chk, err := NewChecker(sessions, hot)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var j HistoryJSON
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			t.Fatal(err)
		}
		if j.Type != "read" {
			continue
		}
		o, ok := outcomeOf(j.Outcome)
		if !ok {
			t.Fatalf("unknown outcome %q", j.Outcome)
		}
		v, err := chk.Check(&Read{Session: j.Session, AckedSeq: j.AckedSeq, Own: j.Own, Hot: j.HotRead, Outcome: o, Conn: j.Conn, ResetSeen: j.ResetSeen})
		if err != nil {
			t.Fatal(err)
		}
		c := out[j.Router]
		if v.RYW {
			c[0]++
		}
		if v.MR {
			c[1]++
		}
		out[j.Router] = c
	}
	return out
}

// outcomeOf is the router.Outcome named name.
func outcomeOf(name string) (router.Outcome, bool) {
	for o := range router.Outcome(router.NumOutcomes) {
		if o.String() == name {
			return o, true
		}
	}
	return 0, false
}
