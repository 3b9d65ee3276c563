package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
)

func runHash(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runCLI(t, context.Background(), append([]string{"hash"}, args...)...)
}

func TestHashRemapJSON(t *testing.T) {
	r := runHash(t, "remap", "--servers", "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1", "--down", "b", "--ids", "20000", "--format", "json")
	if r.code != 0 {
		t.Fatal(r)
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var row struct {
			Table         string  `json:"table"`
			Mode          string  `json:"mode"`
			IDs           int     `json:"ids"`
			MovedPct      float64 `json:"moved_pct"`
			NeedlessPct   float64 `json:"moved_needlessly_pct"`
			DownWeightPct float64 `json:"down_weight_pct"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("%v in %s", err, sc.Text())
		}
		got[row.Mode] = row.MovedPct
		if row.Table != "hash_remap" || row.IDs != 20000 || row.DownWeightPct != 12.5 {
			t.Errorf("row %+v", row)
		}
		if row.Mode == "full-list" && row.NeedlessPct != 0 {
			t.Errorf("full-list moved ids needlessly: %+v", row)
		}
	}
	if len(got) != 3 {
		t.Fatalf("want one line per mode:\n%s", r.stdout)
	}
	if s := got["full-list"]; s < 11 || s > 14 {
		t.Errorf("full-list moved %.3f%%, want about 12.5", s)
	}
	if s := got["available-only"]; s < 80 {
		t.Errorf("available-only moved %.3f%%, want most ids", s)
	}
}

// TestHashFormats: md, csv and json like every other table; CSV counts are
// integers and a number a mode lacks is an empty cell.
func TestHashFormats(t *testing.T) {
	r := runHash(t, "remap", "--servers", "a:1,b:1,c:1", "--down", "c", "--ids", "1000", "--format", "csv")
	if r.code != 0 {
		t.Fatal(r)
	}
	recs, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if err != nil || len(recs) != 4 || recs[0][2] != "ids" || recs[0][3] != "moved" {
		t.Fatalf("csv %v: %v\n%s", recs, err, r.stdout)
	}
	for _, rec := range recs[1:] {
		if rec[2] != "1000" || strings.Contains(rec[3], ".") {
			t.Errorf("counts are not integers: %v", rec)
		}
	}
	r = runHash(t, "explain", "--servers", "a:1,b:1,c:2", "--id", "x", "--format", "csv")
	if r.code != 0 {
		t.Fatal(r)
	}
	recs, err = csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if err != nil || len(recs) != 4 {
		t.Fatalf("csv %v: %v", recs, err)
	}
	if full := recs[1]; full[1] != "full-list" || full[len(full)-1] != "" || full[len(full)-2] != "" {
		t.Errorf("full-list has no load share: want empty cells, got %v", full)
	}
	if r := runHash(t, "remap", "--servers", "a:1,b:1", "--down", "a", "--format", "md"); r.code != 0 || !strings.Contains(r.stdout, "| full-list | 100000 |") {
		t.Errorf("md: %s", r)
	}
}

func TestHashExplainTable(t *testing.T) {
	r := runHash(t, "explain", "--servers", "a:1,b:1,c:2", "--down", "b", "--sql", "/*app:x,consistent_read_id:X*/ SELECT 1")
	if r.code != 0 {
		t.Fatal(r)
	}
	for _, want := range []string{`id "X"`, "| full-list | b | no |", "available-only", "rebalance-override", "reselected-first-choice-down"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestHashBadInput(t *testing.T) {
	cases := [][]string{
		{"explain", "--servers", "a:1,a:1", "--id", "x"},
		{"explain", "--servers", "a:1", "--down", "zz", "--id", "x"},
		{"explain", "--servers", "a:1"},
		{"explain", "--servers", "a:1", "--id", "x", "--format", "xml"},
		{"explain", "--servers", "a:1", "--id", "x", "--format", "table"},
		{"explain", "--servers", "a:1", "--id", "x", "--mode", "modulo"},
		{"remap", "--servers", "a:1,b:1"},
		{"remap", "--servers", "a:1,b:1", "--down", "a", "--ids", "0"},
		{"remap", "--servers", "a:1,b:1", "--inflight", "a:-1"},
		{"remap", "--down", "a"},
	}
	for _, c := range cases {
		if r := runHash(t, c...); r.code != exitUsage || r.stdout != "" {
			t.Errorf("%v: want exit 2 and no output: %s", c, r)
		}
	}
	if r := runHash(t, "explain", "--servers", "a:1", "--sql", "/* consistent_read_id:a */ /* consistent_read_id:b */"); r.code != exitUsage || !strings.Contains(r.stderr, "--sql: ") {
		t.Errorf("two ids: %s", r)
	}
}
