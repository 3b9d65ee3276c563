package sim

import (
	"cmp"
	"slices"
)

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
	evReadIssue                 // a chain issues its next read (id: write)
	evWaitWake                  // a waiting read re-decides (id: write)
	evReadReach                 // a read reaches its node (id: write)
	evReadDone                  // a read's answer lands (id: write)
	evRetry                     // a deferred read tries again (id: write)
)

// event is a value in the queue: no pointers, so the heap is one slice the
// garbage collector never scans.
type event struct {
	key  uint64 // t<<seqBits | push sequence: one compare orders (t, seq)
	t    usec   // when it fires
	id   int32  // write or session index (see evKind)
	kind evKind
}

// seqBits is the width of the push sequence in an event's key; t keeps the
// other 40 bits (12 days in microseconds, far beyond any trial). When the
// sequence would overflow, the queued events are renumbered in order.
const seqBits = 24

// eventHeap is a 4-ary min-heap of events ordered by (t, push order):
// shallower than a binary heap, and a node's children share a cache line. It
// is reused across trials: reset keeps the backing array.
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) reset() { h.ev = h.ev[:0]; h.seq = 0 }

func (h *eventHeap) len() int { return len(h.ev) }

func (h *eventHeap) push(t usec, kind evKind, id int32) {
	if h.seq == 1<<seqBits {
		h.renumber()
	}
	e := event{key: uint64(t)<<seqBits | h.seq, t: t, id: id, kind: kind}
	h.seq++
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 4
		if h.ev[p].key <= e.key {
			break
		}
		h.ev[i] = h.ev[p]
		i = p
	}
	h.ev[i] = e
}

// renumber gives the queued events sequence numbers 0..n-1 in their current
// order, so later pushes sort after them: order is unchanged.
func (h *eventHeap) renumber() {
	slices.SortFunc(h.ev, func(a, b event) int { return cmp.Compare(a.key, b.key) })
	const mask = 1<<seqBits - 1
	for i := range h.ev {
		h.ev[i].key = h.ev[i].key&^mask | uint64(i)
	}
	h.seq = uint64(len(h.ev)) // a sorted slice is a valid heap
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	last := h.ev[n]
	h.ev = h.ev[:n]
	if n == 0 {
		return top
	}
	// Sift the hole at the root down, then drop last into it.
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		mk := h.ev[c].key
		end := min(c+4, n)
		for k := c + 1; k < end; k++ {
			if kk := h.ev[k].key; kk < mk {
				m, mk = k, kk
			}
		}
		if last.key <= mk {
			break
		}
		h.ev[i] = h.ev[m]
		i = m
	}
	h.ev[i] = last
	return top
}
