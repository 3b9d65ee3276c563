package gtid

import (
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Interval is a closed range of GNOs, Start <= End.
type Interval struct {
	Start int64 // first GNO, >= 1
	End   int64 // last GNO (inclusive), <= MaxGNO
}

// SourceKey identifies one source of a set: a UUID and a tag ("" if none).
type SourceKey struct {
	SID SID    // server UUID
	Tag string // lower-case tag, "" for classic GTIDs
}

func (k SourceKey) compare(o SourceKey) int {
	if c := k.SID.compare(o.SID); c != 0 {
		return c
	}
	return strings.Compare(k.Tag, o.Tag)
}

// source is one (UUID, tag) with its sorted, merged, non-empty intervals.
type source struct {
	key SourceKey
	ivs []Interval
}

// Set is a GTID set. The zero value is the empty set. See the package
// documentation for its invariants and value semantics.
type Set struct {
	srcs []source
}

// MustParse is Parse that panics on error, for tests and constants.
func MustParse(s string) Set {
	set, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return set
}

// IsEmpty reports whether the set holds no transaction.
func (s Set) IsEmpty() bool { return len(s.srcs) == 0 }

// Len returns the number of (UUID, tag) sources in the set.
func (s Set) Len() int { return len(s.srcs) }

// Count returns the number of transactions in the set, saturating at
// math.MaxUint64.
func (s Set) Count() uint64 {
	var n uint64
	for _, src := range s.srcs {
		for _, iv := range src.ivs {
			c := uint64(iv.End-iv.Start) + 1
			if n+c < n {
				return math.MaxUint64
			}
			n += c
		}
	}
	return n
}

// Sources yields each source with its intervals, in canonical order. The
// interval slices belong to the set: do not modify or keep them.
func (s Set) Sources() iter.Seq2[SourceKey, []Interval] {
	return func(yield func(SourceKey, []Interval) bool) {
		for _, src := range s.srcs {
			if !yield(src.key, src.ivs) {
				return
			}
		}
	}
}

// Intervals returns a copy of the intervals of one source (nil if absent).
func (s Set) Intervals(sid SID, tag string) []Interval {
	if i, ok := s.search(SourceKey{sid, tag}); ok {
		return slices.Clone(s.srcs[i].ivs)
	}
	return nil
}

// Clone returns a deep copy that shares no memory with s.
func (s Set) Clone() Set {
	if len(s.srcs) == 0 {
		return Set{}
	}
	n := 0
	for _, src := range s.srcs {
		n += len(src.ivs)
	}
	buf := make([]Interval, 0, n)
	out := make([]source, len(s.srcs))
	for i, src := range s.srcs {
		start := len(buf)
		buf = append(buf, src.ivs...)
		out[i] = source{key: src.key, ivs: buf[start:len(buf):len(buf)]}
	}
	return Set{srcs: out}
}

// Prefixes returns, for each source of s, the one interval from GNO 1 to
// the source's last GNO: the smallest superset of s in which no source has
// a gap. A replica that applies each source's transactions in order (MySQL
// replicas with replica_preserve_commit_order=ON, the default since
// 8.0.27) holds a source's GNO n only with 1..n-1, so for such replicas s
// and s.Prefixes() are contained in the same sets. s is not modified.
func (s Set) Prefixes() Set {
	if len(s.srcs) == 0 {
		return Set{}
	}
	buf := make([]Interval, len(s.srcs))
	out := make([]source, len(s.srcs))
	for i, src := range s.srcs {
		buf[i] = Interval{Start: 1, End: src.ivs[len(src.ivs)-1].End}
		out[i] = source{key: src.key, ivs: buf[i : i+1 : i+1]}
	}
	return Set{srcs: out}
}

// String returns the canonical text MySQL prints: lower-case UUIDs, sources
// separated by ",\n", the untagged intervals of a UUID before its tags.
func (s Set) String() string {
	if len(s.srcs) == 0 {
		return ""
	}
	return string(s.appendText(make([]byte, 0, s.textLen()), ",\n"))
}

// CompactString is String with sources separated by "," only (no newline),
// for single-line output. Parse accepts both forms.
func (s Set) CompactString() string {
	if len(s.srcs) == 0 {
		return ""
	}
	return string(s.appendText(make([]byte, 0, s.textLen()), ","))
}

// AppendText appends the canonical (String) form to dst.
func (s Set) AppendText(dst []byte) ([]byte, error) { return s.appendText(dst, ",\n"), nil }

// MarshalText implements encoding.TextMarshaler with the canonical form.
func (s Set) MarshalText() ([]byte, error) { return s.appendText(nil, ",\n"), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (s *Set) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

func (s Set) textLen() int {
	n := 0
	for _, src := range s.srcs {
		n += 38 + len(src.key.Tag) + 1 + 12*len(src.ivs)
	}
	return n
}

func (s Set) appendText(dst []byte, sep string) []byte {
	for i, src := range s.srcs {
		if i == 0 || src.key.SID != s.srcs[i-1].key.SID {
			if i > 0 {
				dst = append(dst, sep...)
			}
			dst = src.key.SID.appendText(dst)
		}
		if src.key.Tag != "" {
			dst = append(dst, ':')
			dst = append(dst, src.key.Tag...)
		}
		for _, iv := range src.ivs {
			dst = append(dst, ':')
			dst = strconv.AppendInt(dst, iv.Start, 10)
			if iv.End != iv.Start {
				dst = append(dst, '-')
				dst = strconv.AppendInt(dst, iv.End, 10)
			}
		}
	}
	return dst
}

// search finds the index of key, or where it would be inserted.
func (s Set) search(key SourceKey) (int, bool) {
	srcs := s.srcs
	if len(srcs) <= 8 {
		for i := range srcs {
			if c := srcs[i].key.compare(key); c >= 0 {
				return i, c == 0
			}
		}
		return len(srcs), false
	}
	lo, hi := 0, len(srcs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if srcs[m].key.compare(key) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(srcs) && srcs[lo].key.compare(key) == 0
}

// ContainsGTID reports whether the set holds transaction g.
func (s Set) ContainsGTID(g GTID) bool {
	if len(s.srcs) > 8 {
		i, ok := s.search(SourceKey{g.SID, g.Tag})
		return ok && containsGNO(s.srcs[i].ivs, g.GNO)
	}
	for i := range s.srcs {
		src := &s.srcs[i]
		if src.key.SID == g.SID && src.key.Tag == g.Tag {
			return containsGNO(src.ivs, g.GNO)
		}
	}
	return false
}

// containsGNO reports whether the sorted, merged intervals hold gno.
func containsGNO(ivs []Interval, gno int64) bool {
	// First interval with End >= gno.
	lo, hi := 0, len(ivs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ivs[m].End < gno {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo < len(ivs) && ivs[lo].Start <= gno
}

// Contains reports whether s includes every transaction of o (o ⊆ s), like
// MySQL's GTID_SUBSET(o, s). It does not allocate.
func (s Set) Contains(o Set) bool {
	if len(o.srcs) > len(s.srcs) {
		return false
	}
	i := 0
	for k := range o.srcs {
		os := &o.srcs[k]
		for {
			if i == len(s.srcs) {
				return false
			}
			ss := &s.srcs[i]
			if ss.key.SID == os.key.SID && ss.key.Tag == os.key.Tag {
				break
			}
			if ss.key.compare(os.key) > 0 {
				return false
			}
			i++
		}
		if !containsIvs(s.srcs[i].ivs, os.ivs) {
			return false
		}
		i++
	}
	return true
}

// AtLeast is Contains, named as in Vitess's Position.
func (s Set) AtLeast(o Set) bool { return s.Contains(o) }

// containsIvs reports whether every interval of sub lies in sup.
//
// For each interval of sub it finds the first interval of sup that ends at
// or after the sub interval's start (the only one that can hold it: sup is
// sorted and merged), starting from where the previous search stopped.
// The search tries the next interval, then gallops (1, 2, 4, ... ahead,
// then binary search), so a sub interval in the next interval of sup
// costs a comparison or two, and one far ahead (a token near the top of a
// fragmented executed set) costs O(log gap) instead of a walk over every
// interval in between.
func containsIvs(sup, sub []Interval) bool {
	if len(sub) == 0 {
		return true
	}
	if len(sup) == 0 || sub[0].Start < sup[0].Start || sub[len(sub)-1].End > sup[len(sup)-1].End {
		return false
	}
	if len(sup) == 1 {
		// One run (the common executed set): sub lies between its ends.
		return true
	}
	for _, x := range sub {
		// Some interval of sup ends at or after x.Start (sup's last End >=
		// sub's last End >= x.Start), so sup never runs out here.
		if sup[0].End < x.Start {
			// Step to the next interval (the common case), then gallop
			// from there. Written out rather than calling gallopEnd: a
			// call makes this a non-leaf function and costs every
			// containment test a frame, nearly doubling the 5-UUID case.
			sup = sup[1:]
			if sup[0].End < x.Start {
				// sup[lo].End < x.Start <= sup[hi].End after the gallop.
				lo, hi, step := 0, 1, 1
				for hi < len(sup)-1 && sup[hi].End < x.Start {
					lo = hi
					step <<= 1
					hi = lo + step
				}
				hi = min(hi, len(sup)-1)
				for lo++; lo < hi; {
					m := int(uint(lo+hi) >> 1)
					if sup[m].End < x.Start {
						lo = m + 1
					} else {
						hi = m
					}
				}
				sup = sup[lo:]
			}
		}
		if sup[0].Start > x.Start || sup[0].End < x.End {
			return false
		}
	}
	return true
}

// Equal reports whether s and o hold the same transactions.
func (s Set) Equal(o Set) bool {
	if len(s.srcs) != len(o.srcs) {
		return false
	}
	for i := range s.srcs {
		a, b := &s.srcs[i], &o.srcs[i]
		if a.key != b.key || !slices.Equal(a.ivs, b.ivs) {
			return false
		}
	}
	return true
}

// setOp builds a new set from s and o source by source. ivOp writes the
// result for one key into dst; a missing side is passed as nil.
func setOp(s, o Set, keepLeftOnly, keepRightOnly bool, ivOp func(dst, a, b []Interval) []Interval) Set {
	n := 0
	for _, src := range s.srcs {
		n += len(src.ivs)
	}
	for _, src := range o.srcs {
		n += len(src.ivs)
	}
	if n == 0 {
		return Set{}
	}
	// Every result holds at most len(a)+len(b) intervals per key, so buf
	// never grows and the sub-slices below stay valid.
	buf := make([]Interval, 0, n)
	out := make([]source, 0, len(s.srcs)+len(o.srcs))
	emit := func(key SourceKey, a, b []Interval) {
		start := len(buf)
		buf = ivOp(buf, a, b)
		if len(buf) > start {
			out = append(out, source{key: key, ivs: buf[start:len(buf):len(buf)]})
		}
	}
	i, j := 0, 0
	for i < len(s.srcs) || j < len(o.srcs) {
		var c int
		switch {
		case i == len(s.srcs):
			c = 1
		case j == len(o.srcs):
			c = -1
		default:
			c = s.srcs[i].key.compare(o.srcs[j].key)
		}
		switch {
		case c < 0:
			if keepLeftOnly {
				emit(s.srcs[i].key, s.srcs[i].ivs, nil)
			}
			i++
		case c > 0:
			if keepRightOnly {
				emit(o.srcs[j].key, nil, o.srcs[j].ivs)
			}
			j++
		default:
			emit(s.srcs[i].key, s.srcs[i].ivs, o.srcs[j].ivs)
			i++
			j++
		}
	}
	if len(out) == 0 {
		return Set{}
	}
	return Set{srcs: out}
}

// Union returns s ∪ o.
func (s Set) Union(o Set) Set { return setOp(s, o, true, true, unionIvs) }

// Subtract returns s \ o, like MySQL's GTID_SUBTRACT(s, o).
func (s Set) Subtract(o Set) Set { return setOp(s, o, true, false, subtractIvs) }

// Intersect returns s ∩ o.
func (s Set) Intersect(o Set) Set { return setOp(s, o, false, false, intersectIvs) }

// UnionInPlace sets *s to s ∪ o.
func (s *Set) UnionInPlace(o Set) {
	if s.Contains(o) {
		return // nothing to add; keep the receiver's storage
	}
	*s = s.Union(o)
}

// SubtractInPlace sets *s to s \ o.
func (s *Set) SubtractInPlace(o Set) {
	if s.Intersects(o) {
		*s = s.Subtract(o)
	}
}

// IntersectInPlace sets *s to s ∩ o.
func (s *Set) IntersectInPlace(o Set) {
	if !o.Contains(*s) {
		*s = s.Intersect(o)
	}
}

// Intersects reports whether s and o share at least one transaction. It does
// not allocate.
func (s Set) Intersects(o Set) bool {
	i, j := 0, 0
	for i < len(s.srcs) && j < len(o.srcs) {
		c := s.srcs[i].key.compare(o.srcs[j].key)
		switch {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			a, b := s.srcs[i].ivs, o.srcs[j].ivs
			x, y := 0, 0
			for x < len(a) && y < len(b) {
				if a[x].Start <= b[y].End && b[y].Start <= a[x].End {
					return true
				}
				if a[x].End < b[y].End {
					x++
				} else {
					y++
				}
			}
			i++
			j++
		}
	}
	return false
}

// unionIvs appends the merged union of a and b to dst.
func unionIvs(dst, a, b []Interval) []Interval {
	base := len(dst)
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var x Interval
		if j == len(b) || (i < len(a) && a[i].Start <= b[j].Start) {
			x = a[i]
			i++
		} else {
			x = b[j]
			j++
		}
		if n := len(dst); n > base && dst[n-1].End >= x.Start-1 {
			if x.End > dst[n-1].End {
				dst[n-1].End = x.End
			}
		} else {
			dst = append(dst, x)
		}
	}
	return dst
}

// subtractIvs appends a \ b to dst.
func subtractIvs(dst, a, b []Interval) []Interval {
	j := 0
	for _, x := range a {
		cur := x.Start
		for j < len(b) && b[j].End < cur {
			j++
		}
		k := j
		for k < len(b) && b[k].Start <= x.End {
			if b[k].Start > cur {
				dst = append(dst, Interval{cur, b[k].Start - 1})
			}
			if b[k].End >= x.End {
				cur = x.End + 1
				break
			}
			cur = b[k].End + 1
			k++
		}
		if cur <= x.End {
			dst = append(dst, Interval{cur, x.End})
		}
		j = k
	}
	return dst
}

// intersectIvs appends a ∩ b to dst.
func intersectIvs(dst, a, b []Interval) []Interval {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo, hi := max(a[i].Start, b[j].Start), min(a[i].End, b[j].End)
		if lo <= hi {
			dst = append(dst, Interval{lo, hi})
		}
		if a[i].End < b[j].End {
			i++
		} else {
			j++
		}
	}
	return dst
}

// Add returns s with g added. It fails only for an invalid g (GNO outside
// 1..MaxGNO, malformed tag).
func (s Set) Add(g GTID) (Set, error) {
	c := s.Clone()
	if err := c.AddInPlace(g); err != nil {
		return Set{}, err
	}
	return c, nil
}

// AddInPlace adds g to s. Appending the next GNO of a source (the binlog's
// common case) does not allocate. It fails only for an invalid g.
func (s *Set) AddInPlace(g GTID) error {
	if err := g.normalize(); err != nil {
		return err
	}
	key := SourceKey{g.SID, g.Tag}
	idx, found := s.search(key)
	if !found {
		s.srcs = slices.Insert(s.srcs, idx, source{key: key, ivs: []Interval{{g.GNO, g.GNO}}})
		return nil
	}
	src := &s.srcs[idx]
	ivs := src.ivs
	n := len(ivs)
	gno := g.GNO
	if last := ivs[n-1]; gno > last.End {
		if gno == last.End+1 {
			ivs[n-1].End = gno
		} else {
			src.ivs = append(ivs, Interval{gno, gno})
		}
		return nil
	}
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ivs[m].End < gno {
			lo = m + 1
		} else {
			hi = m
		}
	}
	k := lo // ivs[k].End >= gno
	if ivs[k].Start <= gno {
		return nil
	}
	joinNext := gno == ivs[k].Start-1
	joinPrev := k > 0 && ivs[k-1].End == gno-1
	switch {
	case joinPrev && joinNext:
		ivs[k-1].End = ivs[k].End
		src.ivs = slices.Delete(ivs, k, k+1)
	case joinPrev:
		ivs[k-1].End = gno
	case joinNext:
		ivs[k].Start = gno
	default:
		src.ivs = slices.Insert(ivs, k, Interval{gno, gno})
	}
	return nil
}
