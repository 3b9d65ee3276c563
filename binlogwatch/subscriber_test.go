package binlogwatch

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/causallab/causallab/gtid"
)

// applyAll feeds b's lines to st.
func applyAll(st *SubscriberState, b []byte) error {
	for _, line := range bytes.SplitAfter(b, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		if err := st.Apply(bytes.TrimSuffix(line, []byte{'\n'})); err != nil {
			return err
		}
	}
	return nil
}

// TestSubscriberStateProperty: what the writer sends (a fresh ST=, then
// I1/I2 or I3/I4 increments) the subscriber reads back exactly: the
// watcher's untagged set at every step.
func TestSubscriberStateProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sets := genGrowth(t)
		batch := rapid.Bool().Draw(t, "batch")
		var untag []gtid.Set
		for _, s := range sets {
			u, _, err := untagged(s)
			if err != nil {
				t.Fatal(err)
			}
			untag = append(untag, u)
		}
		var st SubscriberState
		if err := applyAll(&st, appendBootstrap(nil, untag[0])); err != nil {
			t.Fatalf("ST: %v", err)
		}
		enc := incEncoder{batch: batch}
		for i := 0; i < len(untag); i++ {
			if i > 0 {
				var buf []byte
				if err := enc.encode(untag[i].Subtract(untag[i-1]), &buf, func() error { return nil }); err != nil {
					t.Fatal(err)
				}
				if err := applyAll(&st, buf); err != nil {
					t.Fatalf("step %d %q: %v", i, buf, err)
				}
			}
			if !st.Set.Equal(untag[i]) {
				t.Fatalf("step %d: subscriber has %s, want %s", i, st.Set, untag[i])
			}
		}
	})
}

// TestSubscriberStateErrors: each bad line is an error naming it, and
// leaves the state as it was.
func TestSubscriberStateErrors(t *testing.T) {
	var st SubscriberState
	if err := st.Apply([]byte("I2=5")); err == nil || !strings.Contains(err.Error(), "before ST=") {
		t.Fatalf("I2 before ST=: %v", err)
	}
	if err := st.Apply([]byte("ST=" + tu1 + ":1-3")); err != nil {
		t.Fatal(err)
	}
	want := st.Set.String()
	for _, line := range []string{"I2=4", "I9=1", "ST=nonsense", "I1=zz:4", "I3=" + strings.ReplaceAll(tu1, "-", "") + ":9-7", "I1=" + strings.ReplaceAll(tu1, "-", "") + ":0", "no equals", ""} {
		var cp = st
		err := cp.Apply([]byte(line))
		if err == nil {
			t.Errorf("%q: no error", line)
			continue
		}
		if !strings.Contains(err.Error(), "binlog-reader protocol") {
			t.Errorf("%q: %v does not name the protocol", line, err)
		}
		if cp.Set.String() != want {
			t.Errorf("%q changed the set to %s", line, cp.Set)
		}
	}
}

// FuzzSubscriberApply: no line panics the subscriber; a line it accepts
// after a valid ST= leaves a set that contains the ST='s.
func FuzzSubscriberApply(f *testing.F) {
	for _, s := range []string{"I1=" + strings.ReplaceAll(tu1, "-", "") + ":4", "I2=5", "I3=" + strings.ReplaceAll(tu2, "-", "") + ":1-9", "I4=10-12",
		"ST=" + tu1 + ":1-3," + tu1 + ":5-5", "ST=", "I2=9223372036854775807", "I4=-1-2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var st SubscriberState
		if err := st.Apply([]byte("ST=" + tu1 + ":1-3")); err != nil {
			t.Fatal(err)
		}
		base := st.Set
		if err := st.Apply([]byte("I1=" + strings.ReplaceAll(tu1, "-", "") + ":4")); err != nil {
			t.Fatal(err)
		}
		before := st.Set.Clone()
		if err := st.Apply(line); err != nil {
			if !st.Set.Equal(before) {
				t.Fatalf("%q: refused but changed the set", line)
			}
			return
		}
		if !bytes.HasPrefix(line, []byte("ST=")) && !st.Set.Contains(base) {
			t.Fatalf("%q: the set lost what ST= said", line)
		}
	})
}

// TestSubscriberFollowsServer: a Subscriber against a server of the
// protocol on loopback (ST=, increments, a disconnect and a fresh ST=)
// holds each set, reports the stream down between, and WaitFor returns
// once the set holds what it waits for.
func TestSubscriberFollowsServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := NewSubscriber(SubscriberConfig{Addr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	c := <-conns
	u1 := strings.ReplaceAll(tu1, "-", "")
	if _, err := c.Write([]byte("ST=" + tu1 + ":1-3\nI1=" + u1 + ":4\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitFor(ctx, gtid.MustParse(tu1+":1-4")); err != nil {
		t.Fatal(err)
	}
	if _, up := s.Position(); !up {
		t.Fatal("stream not up after ST=")
	}
	c.Close()
	for {
		if _, up := s.Position(); !up {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c = <-conns
	defer c.Close()
	// The node was reset: the fresh ST= is taken as it is.
	if _, err := c.Write([]byte("ST=" + tu2 + ":1-2\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitFor(ctx, gtid.MustParse(tu2+":1-2")); err != nil {
		t.Fatal(err)
	}
	if set, up := s.Position(); !up || set.Contains(gtid.MustParse(tu1+":1")) {
		t.Fatalf("after a fresh ST=: %s up %v", set, up)
	}
	cancel()
	<-done
}
