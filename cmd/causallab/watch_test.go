package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// TestWatchJSONRealTopology runs `causallab watch --format json` against a
// real primary and replica for a bounded time while the primary takes
// writes, and checks that it prints one JSON line per change, that every
// line's set is within the replica's real @@gtid_executed, and that it
// reaches exactly that set with the replica's real server_uuid.
func TestWatchJSONRealTopology(t *testing.T) {
	topo := composetest.Start(t, compose.Config{Replicas: 1})
	for _, extra := range [][]string{nil, {"--no-ahead"}} {
		t.Run("flags="+strings.Join(extra, ","), func(t *testing.T) { testWatchJSON(t, topo, extra) })
	}
}

func testWatchJSON(t *testing.T, topo *compose.Topology, extra []string) {
	p, r := topo.Primary(), topo.Replicas()[0]
	rdb, err := topo.DB(r.Name)
	if err != nil {
		t.Fatal(err)
	}
	var startText string
	if err := rdb.QueryRow("SELECT @@gtid_executed").Scan(&startText); err != nil {
		t.Fatal(err)
	}
	start := gtid.MustParse(startText)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	root := newRootCmd()
	root.SetOut(pw)
	root.SetErr(io.Discard)
	root.SetArgs(append([]string{"watch", "--format", "json", "--heartbeat", "200ms",
		"--primary", p.DSN(), "--replica", "r1=" + r.DSN()}, extra...))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	cmdErr := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(runCtx)
		pw.Close()
		cmdErr <- err
	}()
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	// Writes on the primary while the command runs.
	pdb, err := topo.DB(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS cw", "CREATE TABLE IF NOT EXISTS cw.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)"} {
		if _, err := pdb.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if _, err := pdb.ExecContext(ctx, "INSERT INTO cw.t (v) VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var uuid, text string
	if err := rdb.QueryRowContext(ctx, "SELECT @@server_uuid, @@gtid_executed").Scan(&uuid, &text); err != nil {
		t.Fatal(err)
	}
	truth := gtid.MustParse(text)
	if !truth.Contains(start) || truth.Count() < start.Count()+20 {
		t.Fatalf("replica executed %s, had %s before 20 writes", truth, start)
	}

	var got []watchLine
	var prev gtid.Set
	check := func(s string) watchLine {
		t.Helper()
		var l watchLine
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("line %d is not a watch line: %v: %s", len(got)+1, err, s)
		}
		if l.Replica != "r1" {
			t.Fatalf("line for replica %q: %s", l.Replica, s)
		}
		if strings.Contains(s, "0001-01-01") || (l.Time != nil && l.Time.IsZero()) {
			t.Fatalf("line %d carries a zero time: %s", len(got)+1, s)
		}
		set, err := gtid.Parse(l.Executed)
		if err != nil {
			t.Fatalf("line %d: executed %q: %v", len(got)+1, l.Executed, err)
		}
		if !truth.Contains(set) {
			t.Fatalf("line %d: executed %s is ahead of the replica's %s", len(got)+1, set, truth)
		}
		if !set.Contains(prev) {
			t.Fatalf("line %d: executed went from %s to %s", len(got)+1, prev, set)
		}
		if n := len(got); n > 0 && keyOf(got[n-1]) == keyOf(l) {
			t.Fatalf("lines %d and %d say the same thing: %s", n, n+1, s)
		}
		prev = set
		got = append(got, l)
		return l
	}
	// Read until a line shows the replica's real set, streaming, 0 behind.
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case s, ok := <-lines:
			if !ok {
				t.Fatalf("command ended early: %v", <-cmdErr)
			}
			l := check(s)
			done = l.Executed == truth.CompactString() && l.ServerUUID == uuid && l.Health == "streaming" && l.Behind == 0
		case <-deadline:
			t.Fatalf("no line with the replica's set %s within 30s; last of %d lines: %+v", truth, len(got), got[len(got)-1])
		}
	}
	// Idle for five heartbeats: heartbeats are not changes, so no line.
	idle := time.After(time.Second)
	for idling := true; idling; {
		select {
		case s := <-lines:
			t.Errorf("line printed while idle: %s", s)
		case <-idle:
			idling = false
		}
	}
	stop()
	select {
	case err := <-cmdErr:
		if err != nil {
			t.Fatalf("watch returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not return within 20s of its context ending")
	}
	for s := range lines {
		check(s)
	}
	t.Logf("%d JSON lines; last: %s (replica's @@gtid_executed %s)", len(got), got[len(got)-1].Executed, truth)
}

// TestWatchProxySQLFlagsBadInput: the --proxysql flags are checked before
// anything connects; a bad value is exit code 2 naming the flag.
func TestWatchProxySQLFlagsBadInput(t *testing.T) {
	base := []string{"--replica", "r1=u:p@tcp(127.0.0.1:1)/", "--proxysql", "r1=127.0.0.1:0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--proxysql-on-shrink", "forget"}, `--proxysql-on-shrink: binlogwatch: shrink policy "forget"`},
		{[]string{"--proxysql-batch", "-1s"}, "Batch -1s is negative"},
		{[]string{"--proxysql-batch", "10us"}, "under 1ms"},
	} {
		cmd := newWatchCmd()
		cmd.SetArgs(append(append([]string{}, base...), tc.args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cmd.ExecuteContext(ctx)
		cancel()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("watch %q: err %v, want exit code 2 and %q", tc.args, err, tc.want)
		}
	}
}
