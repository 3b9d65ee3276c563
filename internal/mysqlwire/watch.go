package mysqlwire

import (
	"sync"
	"time"
)

// WatchProbe is how often a watched statement's node is checked
// (WatchHealth): a replica that stops answering is given up within about
// this much after its position source calls it unhealthy.
const WatchProbe = 100 * time.Millisecond

// WatchHealth calls healthy every WatchProbe until it reports false, then
// calls unhealthy once and stops; stop ends the watch (after stop returns,
// unhealthy is not called). It is the watchdog of a statement on a replica
// that may stop answering while its sockets stay open (a paused server):
// the caller cuts the statement in unhealthy.
func WatchHealth(healthy func() bool, unhealthy func()) (stop func()) {
	var (
		mu   sync.Mutex
		done bool
		t    *time.Timer
	)
	probe := func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		if !healthy() {
			done = true
			unhealthy()
			return
		}
		t.Reset(WatchProbe)
	}
	mu.Lock()
	t = time.AfterFunc(WatchProbe, probe)
	mu.Unlock()
	return func() {
		mu.Lock()
		done = true
		mu.Unlock()
		t.Stop()
	}
}
