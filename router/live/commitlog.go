package live

import (
	"time"

	"github.com/causallab/causallab/gtid"
)

// CommitLog remembers when the router learned each growth of the primary's
// position: a bounded ring of (time, cumulative position) entries. From it,
// Lag estimates how far behind the primary a replica is in time, which is
// what a deferred read's retry estimate needs (router.Replica.Lag,
// router.RetryAfter). The live router feeds it from every write the
// primary acknowledges through it and from the position source's view of
// the primary at each decision.
//
// Entries are cumulative (each position contains every earlier one: the
// router's primary position only grows within an epoch; Reset at a
// failover), so the entries a replica holds are a prefix and Lag is a
// binary search. A growth learned within Resolution of the newest entry
// joins that entry (keeping its time), so the ring spans at least
// Size*Resolution of history; a replica behind the oldest entry gets that
// entry's age, a lower bound.
//
// The zero value is not usable: NewCommitLog. Not safe for concurrent use
// (the Router keeps it under its lock).
type CommitLog[P gtid.Position[P]] struct {
	res     time.Duration
	entries []commitEntry[P] // ring
	head, n int              // index of the oldest entry, entries held
}

type commitEntry[P gtid.Position[P]] struct {
	at  time.Time
	pos P
}

// Default sizes of the router's commit log: 1024 entries at 1 ms (at least
// a second of history under a steady write stream; the ring never holds
// more than 1024 positions).
const (
	defaultCommitLogSize       = 1024
	defaultCommitLogResolution = time.Millisecond
)

// NewCommitLog returns a log of at most size entries (at least 2) that
// merges growths closer than resolution (0: none merged).
func NewCommitLog[P gtid.Position[P]](size int, resolution time.Duration) *CommitLog[P] {
	return &CommitLog[P]{res: max(resolution, 0), entries: make([]commitEntry[P], max(size, 2))}
}

// Len is the number of entries held.
func (l *CommitLog[P]) Len() int { return l.n }

// Reset forgets every entry (a failover: the new primary's positions are
// not comparable with the old log's).
func (l *CommitLog[P]) Reset() { l.head, l.n = 0, 0; clear(l.entries) }

func (l *CommitLog[P]) at(i int) *commitEntry[P] { return &l.entries[(l.head+i)%len(l.entries)] }

// Record notes that the primary's position was pos at time at. A position
// the newest entry already contains adds nothing; pos must contain the
// newest entry's (the caller records its cumulative position).
func (l *CommitLog[P]) Record(at time.Time, pos P) {
	if l.n > 0 {
		last := l.at(l.n - 1)
		if last.pos.Contains(pos) {
			return
		}
		if at.Sub(last.at) < l.res {
			last.pos = pos
			return
		}
	}
	if l.n == len(l.entries) {
		l.entries[l.head] = commitEntry[P]{}
		l.head = (l.head + 1) % len(l.entries)
		l.n--
	}
	*l.at(l.n) = commitEntry[P]{at: at, pos: pos}
	l.n++
}

// Lag is how long ago the router learned the oldest primary position that
// applied lacks (now minus that entry's time; 0 when applied holds every
// entry, or the log is empty). It is a lower bound of the age of the oldest
// transaction applied lacks, up to Resolution: the router learns of a
// commit at or after it happens.
func (l *CommitLog[P]) Lag(applied P, now time.Time) time.Duration {
	if l.n == 0 || applied.Contains(l.at(l.n-1).pos) {
		return 0
	}
	// The first entry applied lacks: entries are cumulative, so those it
	// holds are a prefix.
	lo, hi := 0, l.n-1
	for lo < hi {
		mid := (lo + hi) / 2
		if applied.Contains(l.at(mid).pos) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return max(now.Sub(l.at(lo).at), 0)
}

// Age is how long ago the router learned a primary position containing p
// (now minus the first such entry's time): the age of the newest
// transaction of p, up to Resolution, as Lag is of the oldest one a
// replica lacks. A p newer than every entry (the router has not recorded
// it yet) gets the newest entry's age, the most it can be; one that the
// oldest entry already holds gets the oldest's age. False when the log is
// empty.
func (l *CommitLog[P]) Age(p P, now time.Time) (time.Duration, bool) {
	if l.n == 0 {
		return 0, false
	}
	lo, hi := 0, l.n-1
	for lo < hi {
		mid := (lo + hi) / 2
		if l.at(mid).pos.Contains(p) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return max(now.Sub(l.at(lo).at), 0), true
}
