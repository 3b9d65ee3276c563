package lab

import (
	"bufio"
	"bytes"
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

// recount is Recount over a JSON-lines history: each router's RYW and
// MR counts.
func recount(t *testing.T, b []byte, sessions, hot int) map[string][2]int64 {
	t.Helper()
	rows, err := Recount(bytes.NewReader(b), sessions, hot)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int64{}
	for r, c := range rows {
		out[r] = [2]int64{c.RYW, c.MR}
	}
	return out
}

// TestHistoryOwnRowsOnly: a history whose sessions read only their own
// rows (the engines failover's and lab gated's: no hot rows, a write's
// Hot -1) writes strict EDN, a known write :ok and a refused read :fail,
// and Recount finds its RYW and went-backwards reads.
func TestHistoryOwnRowsOnly(t *testing.T) {
	h := []HistoryOp{
		{Router: "gtid-set", Session: 0, Write: true, Invoke: msec(1), Complete: msec(2), Hot: -1, Seq: 1},
		{Router: "gtid-set", Session: 0, Invoke: msec(3), Complete: msec(4), Outcome: router.OutReplica, Own: 1, AckedSeq: 1},
		{Router: "scalar", Session: 1, Write: true, Invoke: msec(1), Complete: msec(5), Hot: -1, Seq: 1},
		{Router: "scalar", Session: 1, Write: true, Invoke: msec(6), Complete: msec(9), Hot: -1, Seq: 2, WriteError: true},
		{Router: "scalar", Session: 1, Invoke: msec(10), Complete: msec(11), Outcome: router.OutReplica, Own: 2, AckedSeq: 1},
		{Router: "scalar", Session: 1, Invoke: msec(12), Complete: msec(13), Outcome: router.OutReplica, Own: 0, AckedSeq: 1},
		{Router: "gtid-set", Session: 0, Invoke: msec(14), Complete: msec(15), Outcome: router.OutTimedOut, AckedSeq: 1},
	}
	var js, edn bytes.Buffer
	if err := WriteHistoryJSON(&js, h); err != nil {
		t.Fatal(err)
	}
	if err := WriteHistoryEDN(&edn, h, 2, 0); err != nil {
		t.Fatal(err)
	}
	checkEDN(t, edn.Bytes(), len(h))
	for _, want := range []string{":type :ok, :process 0, :router \"gtid-set\", :run 0, :f :txn, :value [[:w 0 1]]}",
		":type :info, :process 1, :router \"scalar\", :run 0, :f :txn, :value [[:w 1 2]]}",
		":type :ok, :process 1, :router \"scalar\", :run 0, :f :txn, :value [[:r 1 0]]}",
		":type :fail, :process 0, :router \"gtid-set\", :run 0, :f :txn, :value [[:r 0 nil]]}"} {
		if !bytes.Contains(edn.Bytes(), []byte(want)) {
			t.Errorf("the EDN lacks %q:\n%s", want, edn.Bytes())
		}
	}
	rows, err := Recount(&js, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g, s := rows["gtid-set"], rows["scalar"]; g != (RecountRow{Reads: 2, Served: 1}) || s != (RecountRow{Reads: 2, Served: 2, RYW: 1, OwnBackwards: 1}) {
		t.Errorf("Recount: gtid-set %+v, scalar %+v", g, s)
	}
}
