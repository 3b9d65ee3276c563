package sim

// usec is simulated time in integer microseconds since the trial started.
type usec = int64

const (
	usPerMs  usec = 1000
	usPerSec usec = 1_000_000
)

// evKind names what an event does when it fires.
type evKind uint8

const (
	evWriteArrive evKind = iota // a write reaches the primary (id: write)
	evWriteAck                  // the client receives the write's ack (id: write)
	evReadIssue                 // a session issues its next read (id: session)
	evWaitWake                  // a waiting read re-decides (id: session)
	evReadReach                 // a read reaches its node (id: session)
	evReadDone                  // a read's answer lands (id: session)
)

// event is a value in the queue: no pointers, so the heap is one slice the
// garbage collector never scans.
type event struct {
	t    usec   // when it fires
	seq  uint64 // push order: the tie-break that makes equal times deterministic
	id   int32  // write or session index (see evKind)
	kind evKind
}

// eventHeap is a 4-ary min-heap of events ordered by (t, seq): shallower
// than a binary heap, and a node's children share a cache line or two. It is
// reused across trials: reset keeps the backing array.
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) reset() { h.ev = h.ev[:0]; h.seq = 0 }

func (h *eventHeap) len() int { return len(h.ev) }

func less(a, b *event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

func (h *eventHeap) push(t usec, kind evKind, id int32) {
	h.seq++
	h.ev = append(h.ev, event{t: t, seq: h.seq, id: id, kind: kind})
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !less(&h.ev[i], &h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev = h.ev[:n]
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		end := min(c+4, n)
		for k := c + 1; k < end; k++ {
			if less(&h.ev[k], &h.ev[m]) {
				m = k
			}
		}
		if !less(&h.ev[m], &h.ev[i]) {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}
