package binlogwatch

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// source is one GTID source: a server UUID plus an optional (lower-case) tag.
type source struct {
	sid [16]byte
	tag string
}

func (s source) compare(o source) int {
	if c := bytes.Compare(s.sid[:], o.sid[:]); c != 0 {
		return c
	}
	return strings.Compare(s.tag, o.tag)
}

// interval is a closed range [start, end] of GNOs.
type interval struct{ start, end int64 }

type sourceIntervals struct {
	src source
	ivs []interval
}

// liveSet is the watcher's private, mutable executed set. It is owned by one
// goroutine. Invariants: srcs sorted by source, no source without
// intervals, each source's intervals sorted, non-empty, and neither
// overlapping nor adjacent (a.end+1 < b.start).
type liveSet struct {
	srcs []sourceIntervals
	last int // index of the source touched last: the common fast path
}

func (s *liveSet) find(src source) (int, bool) {
	if s.last < len(s.srcs) && s.srcs[s.last].src == src {
		return s.last, true
	}
	return slices.BinarySearchFunc(s.srcs, src, func(e sourceIntervals, t source) int { return e.src.compare(t) })
}

// contains reports whether gno of src is in the set.
func (s *liveSet) contains(src source, gno int64) bool {
	i, ok := s.find(src)
	if !ok {
		return false
	}
	ivs := s.srcs[i].ivs
	j, _ := slices.BinarySearchFunc(ivs, gno, func(iv interval, g int64) int {
		switch {
		case iv.end < g:
			return -1
		case iv.start > g:
			return 1
		}
		return 0
	})
	return j < len(ivs) && ivs[j].start <= gno && gno <= ivs[j].end
}

// add inserts gno of src; it reports false when gno was already present.
func (s *liveSet) add(src source, gno int64) bool {
	i, ok := s.find(src)
	if !ok {
		s.srcs = slices.Insert(s.srcs, i, sourceIntervals{src: src, ivs: []interval{{gno, gno}}})
		s.last = i
		return true
	}
	s.last = i
	ivs := s.srcs[i].ivs
	n := len(ivs)
	// Fast path: the next transaction of the newest interval.
	if lastIv := &ivs[n-1]; gno > lastIv.end {
		if gno == lastIv.end+1 {
			lastIv.end = gno
		} else {
			s.srcs[i].ivs = append(ivs, interval{gno, gno})
		}
		return true
	}
	// j: first interval whose end >= gno-1 (it may absorb gno at its end).
	j, _ := slices.BinarySearchFunc(ivs, gno, func(iv interval, g int64) int {
		if iv.end < g-1 {
			return -1
		}
		return 1
	})
	iv := &ivs[j]
	if iv.start <= gno && gno <= iv.end {
		return false
	}
	switch {
	case iv.end == gno-1: // extend j upwards, maybe merge with j+1
		iv.end = gno
		if j+1 < n && ivs[j+1].start == gno+1 {
			iv.end = ivs[j+1].end
			s.srcs[i].ivs = slices.Delete(ivs, j+1, j+2)
		}
	case iv.start == gno+1: // extend j downwards
		iv.start = gno
	default: // gno sits alone before j
		s.srcs[i].ivs = slices.Insert(ivs, j, interval{gno, gno})
	}
	return true
}

// addInterval inserts every GNO of [start, end] of src.
func (s *liveSet) addInterval(src source, start, end int64) {
	i, ok := s.find(src)
	if !ok {
		s.srcs = slices.Insert(s.srcs, i, sourceIntervals{src: src})
	}
	ivs := append(s.srcs[i].ivs, interval{start, end})
	slices.SortFunc(ivs, func(a, b interval) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	out := ivs[:1]
	for _, iv := range ivs[1:] {
		p := &out[len(out)-1]
		if iv.start <= p.end+1 {
			p.end = max(p.end, iv.end)
			continue
		}
		out = append(out, iv)
	}
	s.srcs[i].ivs = out
	s.last = i
}

// clone returns a deep copy.
func (s *liveSet) clone() *liveSet {
	c := &liveSet{srcs: make([]sourceIntervals, len(s.srcs))}
	for i, si := range s.srcs {
		c.srcs[i] = sourceIntervals{src: si.src, ivs: slices.Clone(si.ivs)}
	}
	return c
}

// isEmpty reports whether the set holds no transaction.
func (s *liveSet) isEmpty() bool { return len(s.srcs) == 0 }

// containsSet reports whether every transaction of o is in s.
func (s *liveSet) containsSet(o *liveSet) bool {
	for _, so := range o.srcs {
		i, ok := s.find(so.src)
		if !ok {
			return false
		}
		mine := s.srcs[i].ivs
		k := 0
		for _, iv := range so.ivs {
			for k < len(mine) && mine[k].end < iv.start {
				k++
			}
			if k == len(mine) || mine[k].start > iv.start || mine[k].end < iv.end {
				return false
			}
		}
	}
	return true
}

// missing counts the transactions of o that s lacks.
func (s *liveSet) missing(o *liveSet) int64 {
	var n int64
	for _, so := range o.srcs {
		var mine []interval
		if i, ok := s.find(so.src); ok {
			mine = s.srcs[i].ivs
		}
		for _, iv := range so.ivs {
			n += iv.end - iv.start + 1
			for _, m := range mine {
				lo, hi := max(m.start, iv.start), min(m.end, iv.end)
				if lo <= hi {
					n -= hi - lo + 1
				}
			}
		}
	}
	return n
}

func formatUUID(dst []byte, sid [16]byte, dashes bool) []byte {
	var buf [32]byte
	hex.Encode(buf[:], sid[:])
	if !dashes {
		return append(dst, buf[:]...)
	}
	dst = append(dst, buf[0:8]...)
	dst = append(dst, '-')
	dst = append(dst, buf[8:12]...)
	dst = append(dst, '-')
	dst = append(dst, buf[12:16]...)
	dst = append(dst, '-')
	dst = append(dst, buf[16:20]...)
	dst = append(dst, '-')
	return append(dst, buf[20:32]...)
}

// appendIntervals writes ":a-b:c" for ivs.
func appendIntervals(dst []byte, ivs []interval) []byte {
	for _, iv := range ivs {
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, iv.start, 10)
		if iv.end != iv.start {
			dst = append(dst, '-')
			dst = strconv.AppendInt(dst, iv.end, 10)
		}
	}
	return dst
}

// String formats the set as MySQL does, sources separated by sep (MySQL
// prints ",\n"), a UUID's untagged intervals first, then each tag.
func (s *liveSet) format(sep string) string {
	var b []byte
	var prev [16]byte
	for i, si := range s.srcs {
		if i > 0 && si.src.sid == prev {
			b = append(b, ':')
			b = append(b, si.src.tag...)
			b = appendIntervals(b, si.ivs)
			continue
		}
		if i > 0 {
			b = append(b, sep...)
		}
		b = formatUUID(b, si.src.sid, true)
		if si.src.tag != "" {
			b = append(b, ':')
			b = append(b, si.src.tag...)
		}
		b = appendIntervals(b, si.ivs)
		prev = si.src.sid
	}
	return string(b)
}

func (s *liveSet) String() string { return s.format(",") }

// parseLiveSet parses a MySQL GTID set text (as @@gtid_executed prints it).
func parseLiveSet(text string) (*liveSet, error) {
	text = strings.TrimSpace(text)
	s := &liveSet{}
	if text == "" {
		return s, nil
	}
	gs, err := mysql.ParseMysqlGTIDSet(text)
	if err != nil {
		return nil, fmt.Errorf("binlogwatch: GTID set %q: %w", text, err)
	}
	ms := gs.(*mysql.MysqlGTIDSet)
	for u, tags := range *ms {
		for tag, ivs := range tags {
			src := source{sid: u, tag: tag.String()}
			for _, iv := range ivs {
				if iv.Start < 1 || iv.Stop <= iv.Start {
					return nil, fmt.Errorf("binlogwatch: GTID set %q: interval %d-%d of %s is empty or starts below 1", text, iv.Start, iv.Stop-1, u)
				}
				s.addInterval(src, iv.Start, iv.Stop-1) // go-mysql intervals are half-open
			}
		}
	}
	return s, nil
}
