package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func runHash(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"hash"}, args...))
	err := root.Execute()
	return out.String(), err
}

func TestHashRemapJSON(t *testing.T) {
	out, err := runHash(t, "remap", "--servers", "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1", "--down", "b", "--ids", "20000", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Mode            string  `json:"mode"`
		IDs             int     `json:"ids"`
		MovedShare      float64 `json:"moved_share"`
		NeedlessShare   float64 `json:"moved_needlessly_share"`
		DownWeightShare float64 `json:"down_weight_share"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	got := map[string]float64{}
	for _, r := range rows {
		got[r.Mode] = r.MovedShare
		if r.IDs != 20000 || r.DownWeightShare != 0.125 {
			t.Errorf("row %+v", r)
		}
		if r.Mode == "full-list" && r.NeedlessShare != 0 {
			t.Errorf("full-list moved ids needlessly: %+v", r)
		}
	}
	if s := got["full-list"]; s < 0.11 || s > 0.14 {
		t.Errorf("full-list moved %.3f, want about 0.125", s)
	}
	if s := got["available-only"]; s < 0.8 {
		t.Errorf("available-only moved %.3f, want most ids", s)
	}
}

func TestHashExplainTable(t *testing.T) {
	out, err := runHash(t, "explain", "--servers", "a:1,b:1,c:2", "--down", "b", "--sql", "/*app:x,consistent_read_id:X*/ SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"full-list", "available-only", "rebalance-override", "b (down)", "reselected-first-choice-down"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestHashBadInput(t *testing.T) {
	cases := [][]string{
		{"explain", "--servers", "a:1,a:1", "--id", "x"},
		{"explain", "--servers", "a:1", "--down", "zz", "--id", "x"},
		{"explain", "--servers", "a:1"},
		{"explain", "--servers", "a:1", "--id", "x", "--format", "xml"},
		{"explain", "--servers", "a:1", "--id", "x", "--mode", "modulo"},
		{"explain", "--servers", "a:1", "--sql", "/* consistent_read_id:a */ /* consistent_read_id:b */"},
		{"remap", "--servers", "a:1,b:1"},
		{"remap", "--servers", "a:1,b:1", "--down", "a", "--ids", "0"},
		{"remap", "--servers", "a:1,b:1", "--inflight", "a:-1"},
	}
	for _, c := range cases {
		if _, err := runHash(t, c...); err == nil {
			t.Errorf("%v: accepted", c)
		}
	}
}
