package lab

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

// deadNodes is a topology whose primary refuses every connection.
type deadNodes struct{ primary compose.Node }

func (d deadNodes) Primary() compose.Node    { return d.primary }
func (d deadNodes) Replicas() []compose.Node { return nil }
func (d deadNodes) Epoch() uint64            { return 1 }

// TestPollerStartWaitsForPrimary: start keeps polling a primary whose
// polls fail (a loaded machine's first attempt may time out) and gives up
// after firstPoll with an error saying so, not after the first failure.
func TestPollerStartWaitsForPrimary(t *testing.T) {
	// A port nothing listens on: every dial is refused at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	nodes := deadNodes{compose.Node{Name: "primary", Host: "127.0.0.1", Port: port, User: "u", Password: "p"}}
	p := newPoller(nodes, flavorOf(""), 10*time.Millisecond, 100*time.Millisecond, nil, slog.New(slog.DiscardHandler))
	p.firstPoll = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	err = p.start(ctx, &wg)
	cancel()
	wg.Wait()
	if err == nil || !strings.Contains(err.Error(), "did not answer a position poll within 500ms") {
		t.Fatalf("start on a dead primary: %v", err)
	}
	if n := p.pollErrors.Load(); n < 3 {
		t.Errorf("start gave up after %d failed polls: the primary's first failure must not end the wait", n)
	}
}
