package binlogwatch

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
)

// readerClient parses the ProxySQL binlog-reader protocol the way
// ProxySQL's GTID_Server_Data does: ST= bootstrap (dashed UUIDs, stripped
// when stored), I1=<uuid>:<gno> and I2=<gno> reusing the last UUID.
type readerClient struct {
	set     map[string]map[int64]bool // uuid without dashes -> gnos
	uuid    string
	lines   int
	sawST   bool
	scanner *bufio.Scanner
}

func newReaderClient(c net.Conn) *readerClient {
	return &readerClient{set: map[string]map[int64]bool{}, scanner: bufio.NewScanner(c)}
}

func (r *readerClient) add(uuid string, a, b int64) {
	if r.set[uuid] == nil {
		r.set[uuid] = map[int64]bool{}
	}
	for g := a; g <= b; g++ {
		r.set[uuid][g] = true
	}
}

// parseLine applies one protocol line.
func (r *readerClient) parseLine(line string) error {
	r.lines++
	switch {
	case strings.HasPrefix(line, "ST="):
		r.sawST = true
		body := line[3:]
		if body == "" {
			return nil
		}
		for _, tok := range strings.Split(body, ",") {
			parts := strings.Split(tok, ":")
			if len(parts) < 2 {
				return fmt.Errorf("bootstrap token %q has no interval", tok)
			}
			uuid := strings.ReplaceAll(parts[0], "-", "")
			if len(uuid) != 32 {
				return fmt.Errorf("bootstrap uuid %q", parts[0])
			}
			for _, iv := range parts[1:] {
				a, b, ok := strings.Cut(iv, "-")
				lo, err := strconv.ParseInt(a, 10, 64)
				if err != nil {
					return fmt.Errorf("interval %q: %v", iv, err)
				}
				hi := lo
				if ok {
					if hi, err = strconv.ParseInt(b, 10, 64); err != nil {
						return fmt.Errorf("interval %q: %v", iv, err)
					}
				}
				r.add(uuid, lo, hi)
			}
		}
	case strings.HasPrefix(line, "I1="):
		uuid, g, ok := strings.Cut(line[3:], ":")
		if !ok || len(uuid) != 32 || strings.Contains(uuid, "-") {
			return fmt.Errorf("I1 line %q: want a 32-digit uuid without dashes", line)
		}
		n, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			return fmt.Errorf("I1 line %q: %v", line, err)
		}
		r.uuid = uuid
		r.add(uuid, n, n)
	case strings.HasPrefix(line, "I2="):
		if r.uuid == "" {
			return fmt.Errorf("I2 line %q before any I1", line)
		}
		n, err := strconv.ParseInt(line[3:], 10, 64)
		if err != nil {
			return fmt.Errorf("I2 line %q: %v", line, err)
		}
		r.add(r.uuid, n, n)
	default:
		return fmt.Errorf("unknown line %q", line)
	}
	return nil
}

// matches reports whether the client's set equals the untagged part of want.
func (r *readerClient) matches(want gtid.Set) bool {
	n := 0
	for key, ivs := range want.Sources() {
		if key.Tag != "" {
			continue
		}
		u := strings.ReplaceAll(key.SID.String(), "-", "")
		for _, iv := range ivs {
			for g := iv.Start; g <= iv.End; g++ {
				if !r.set[u][g] {
					return false
				}
				n++
			}
		}
	}
	total := 0
	for _, gs := range r.set {
		total += len(gs)
	}
	return total == n
}

func testWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := New(Config{Name: "r1", Host: "127.0.0.1", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestProxySQLReaderProtocol(t *testing.T) {
	w := testWatcher(t)
	const u1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	const u2 = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	w.pub.publish(&Snapshot{Replica: "r1", Executed: gtid.MustParse(u1 + ":1-5:7," + u1 + ":blue:1-3"), Health: HealthStreaming})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewProxySQLServer(w, nil)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rc := newReaderClient(c)
	next := func() string {
		t.Helper()
		if !rc.scanner.Scan() {
			t.Fatalf("connection ended: %v", rc.scanner.Err())
		}
		line := rc.scanner.Text()
		if err := rc.parseLine(line); err != nil {
			t.Fatal(err)
		}
		return line
	}
	if got, want := next(), "ST="+u1+":1-5:7"; got != want {
		t.Fatalf("bootstrap %q, want %q (tags left out)", got, want)
	}
	if srv.SkippedTagged() != 3 {
		t.Fatalf("SkippedTagged %d, want 3", srv.SkippedTagged())
	}
	// New transactions: 6 (fills the gap), 8, then a second UUID, then u1 again.
	steps := []string{
		u1 + ":1-7",
		u1 + ":1-8",
		u1 + ":1-8," + u2 + ":1-2",
		u1 + ":1-9," + u2 + ":1-2," + u1 + ":blue:1-4",
	}
	wantLines := [][]string{
		{"I1=3e11fa4771ca11e19e33c80aa9429562:6"},
		{"I2=8"},
		{"I1=4e11fa4771ca11e19e33c80aa9429562:1", "I2=2"},
		{"I1=3e11fa4771ca11e19e33c80aa9429562:9"},
	}
	for i, st := range steps {
		set := gtid.MustParse(st)
		if i < 3 {
			set = set.Union(gtid.MustParse(u1 + ":blue:1-3"))
		}
		w.pub.publish(&Snapshot{Replica: "r1", Executed: set, Health: HealthStreaming})
		for _, want := range wantLines[i] {
			if got := next(); got != want {
				t.Fatalf("step %d: line %q, want %q", i, got, want)
			}
		}
		if !rc.matches(set) {
			t.Fatalf("step %d: client set %v does not match %s", i, rc.set, set)
		}
	}
	// A resync to a smaller set disconnects the client, which re-bootstraps.
	w.pub.publish(&Snapshot{Replica: "r1", Executed: gtid.MustParse(u2 + ":1"), Health: HealthStreaming})
	if rc.scanner.Scan() {
		t.Fatalf("client not disconnected after the set shrank; got %q", rc.scanner.Text())
	}
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	rc2 := newReaderClient(c2)
	if !rc2.scanner.Scan() || rc2.scanner.Text() != "ST="+u2+":1" {
		t.Fatalf("re-bootstrap line %q (%v)", rc2.scanner.Text(), rc2.scanner.Err())
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if srv.Dropped() != 1 {
		t.Fatalf("Dropped %d, want 1", srv.Dropped())
	}
}

func TestProxySQLReaderEmptySet(t *testing.T) {
	w := testWatcher(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewProxySQLServer(w, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	sc := bufio.NewScanner(c)
	if !sc.Scan() || sc.Text() != "ST=" {
		t.Fatalf("bootstrap of an empty set: %q %v", sc.Text(), sc.Err())
	}
	w.pub.publish(&Snapshot{Replica: "r1", Executed: gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1"), Health: HealthStreaming})
	if !sc.Scan() || sc.Text() != "I1=3e11fa4771ca11e19e33c80aa9429562:1" {
		t.Fatalf("first transaction: %q %v", sc.Text(), sc.Err())
	}
}

// FuzzReaderClientLine: the test client's line parser never panics and a
// bootstrap it accepts holds only 32-digit uuids.
func FuzzReaderClientLine(f *testing.F) {
	for _, s := range []string{"ST=", "ST=3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7", "I1=3e11fa4771ca11e19e33c80aa9429562:6", "I2=8", "I3=x", "ST=a:b", "I1=:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		rc := &readerClient{set: map[string]map[int64]bool{}}
		if err := rc.parseLine(line); err != nil {
			return
		}
		for u := range rc.set {
			if len(u) != 32 {
				t.Fatalf("accepted uuid %q", u)
			}
		}
	})
}

func TestWaitForAndSnapshot(t *testing.T) {
	w := testWatcher(t)
	want := gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.WaitFor(ctx, want); err == nil {
		t.Fatal("WaitFor returned before the set was published")
	}
	done := make(chan error, 1)
	go func() { done <- w.WaitFor(context.Background(), want) }()
	w.pub.publish(&Snapshot{Replica: "r1", Executed: gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-2")})
	select {
	case err := <-done:
		t.Fatalf("WaitFor returned early: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	w.pub.publish(&Snapshot{Replica: "r1", Executed: gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-4")})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := w.Snapshot(); s.Seq != 2 {
		t.Fatalf("seq %d", s.Seq)
	}
	// A stopped watcher ends waits.
	go func() {
		done <- w.WaitFor(context.Background(), gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:9"))
	}()
	w.pub.publish(&Snapshot{Replica: "r1", Stopped: true})
	if err := <-done; err != ErrStopped {
		t.Fatalf("err %v, want ErrStopped", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{User: "u"},
		{Host: "h"},
		{Host: "h", User: "u", HeartbeatPeriod: time.Second, ReadTimeout: time.Second},
		{Host: "h", User: "u", BackoffMin: time.Second, BackoffMax: time.Millisecond},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	w, err := New(Config{Host: "h", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if w.cfg.ReadTimeout <= w.cfg.HeartbeatPeriod || w.cfg.ServerID < 1<<31 || w.cfg.Port != 3306 || w.Name() != "h:3306" {
		t.Fatalf("defaults %+v", w.cfg)
	}
}
