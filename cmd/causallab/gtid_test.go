package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func runGTID(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newGTIDCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

const (
	cu1 = "3e11fa47-71ca-11e1-9e33-c80aa9429561"
	cu2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
)

func TestGTIDCommands(t *testing.T) {
	tests := []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"contains", cu1 + ":1-10", cu1 + ":3-4"}, "true\n"},
		{"", []string{"contains", cu1 + ":3-4", cu1 + ":1-10"}, "false\n"},
		{"", []string{"subset", cu1 + ":3-4", cu1 + ":1-10"}, "true\n"},
		{"", []string{"union", cu2 + ":1", strings.ToUpper(cu1) + ":2"}, cu1 + ":2,\n" + cu2 + ":1\n"},
		{"", []string{"union", "--compact", cu2 + ":1", cu1 + ":2"}, cu1 + ":2," + cu2 + ":1\n"},
		{"", []string{"subtract", cu1 + ":1-10:t:1-2", cu1 + ":5"}, cu1 + ":1-4:6-10:t:1-2\n"},
		{"", []string{"intersect", cu1 + ":1-10", cu1 + ":5-20"}, cu1 + ":5-10\n"},
		{"", []string{"normalize", cu1 + ":4-5:1-3"}, cu1 + ":1-5\n"},
		{"", []string{"normalize", ""}, "\n"},
		{cu1 + ":1-3,\n" + cu1 + ":4\n", []string{"normalize", "-"}, cu1 + ":1-4\n"},
		{cu1 + ":1-3\n", []string{"contains", "-", cu1 + ":2"}, "true\n"},
	}
	for _, tc := range tests {
		got, err := runGTID(t, tc.stdin, tc.args...)
		if err != nil || got != tc.want {
			t.Errorf("gtid %q = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}

func TestGTIDCommandsBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"contains", cu1 + ":1", cu1 + ":0"}, `argument B: gtid: bad text "0" at byte 37: GNO 0`},
		{[]string{"union", cu1[:30] + "zz:1", cu1 + ":1"}, `argument A: gtid: bad text "zz:1" at byte 30`},
		{[]string{"normalize", cu1 + ":5-3"}, "greater than its end"},
		{[]string{"subtract", "-", "-"}, "only one argument"},
	} {
		_, err := runGTID(t, "", tc.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gtid %q: err %v, want exit code 2 and %q", tc.args, err, tc.want)
		}
	}
	if _, err := runGTID(t, "", "contains", cu1+":1"); err == nil {
		t.Error("missing argument accepted")
	}
}
