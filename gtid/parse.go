package gtid

import (
	"slices"
	"strings"
)

// Parse parses a GTID set in the text MySQL prints or accepts:
//
//	uuid:1-5:7[:tag:1-3...][, uuid:...]
//
// It accepts upper- or lower-case UUIDs and tags, UUIDs with braces or
// without dashes, whitespace (including newlines) around every token,
// repeated UUIDs and tags, overlapping or unsorted intervals, and empty
// elements between commas; the result is normalised (see the package
// invariants). The empty string (or only whitespace) is the empty set.
//
// It rejects, with a *ParseError naming the offending text and its byte
// offset: a malformed UUID, a UUID or tag with no interval after it, GNO 0,
// an interval whose start exceeds its end, a number past MaxGNO, an empty or
// over-long tag, and any stray character. (MySQL itself silently accepts a
// bare UUID, a tag without intervals and "5-3" as empty; we treat them as
// errors because they usually mean truncated input.)
func Parse(s string) (Set, error) {
	nColon := strings.Count(s, ":")
	if nColon == 0 {
		empty := true
		for i := 0; i < len(s) && empty; i++ {
			empty = isWS(s[i]) || s[i] == ','
		}
		if empty {
			return Set{}, nil
		}
		// Fall through: the loop below names the error precisely.
	}
	// Upper bounds: every interval and every source follows a ':'.
	ivs := make([]Interval, 0, nColon)
	srcs := make([]source, 0, strings.Count(s, ",")+1)
	i := skipWS(s, 0)
	for i < len(s) {
		if s[i] == ',' { // empty element
			i = skipWS(s, i+1)
			continue
		}
		uuidPos := i
		sid, ok := parseDashedFast(s, i)
		if ok {
			i += 36
		} else {
			var err error
			if sid, i, err = parseSIDAt(s, i); err != nil {
				return Set{}, err
			}
		}
		key := SourceKey{SID: sid}
		segStart := len(ivs) // first interval of the current (sid, tag)
		tagPos := -1         // offset of the open tag, -1 if untagged
		items := 0
		for {
			j := skipWS(s, i)
			if j >= len(s) || s[j] != ':' {
				break
			}
			i = skipWS(s, j+1)
			if i >= len(s) {
				return Set{}, newParseError(s, i, "expected an interval or a tag after ':'")
			}
			c := s[i]
			switch {
			case c >= '0' && c <= '9':
				start, j, err := parseGNO(s, i)
				if err != nil {
					return Set{}, err
				}
				end := start
				k := skipWS(s, j)
				if k < len(s) && s[k] == '-' {
					k = skipWS(s, k+1)
					end, j, err = parseGNO(s, k)
					if err != nil {
						return Set{}, err
					}
					if start > end {
						return Set{}, newParseError(s, i, "interval start %d is greater than its end %d", start, end)
					}
				}
				ivs = append(ivs, Interval{start, end})
				i = j
			case isTagStart(c):
				if len(ivs) == segStart && items > 0 {
					return Set{}, newParseError(s, tagPos, "tag has no interval after it")
				}
				end, err := scanTag(s, i)
				if err != nil {
					return Set{}, err
				}
				if len(ivs) > segStart {
					srcs = append(srcs, source{key: key, ivs: ivs[segStart:len(ivs):len(ivs)]})
				}
				key.Tag = lowerTag(strings.Clone(s[i:end]))
				segStart, tagPos = len(ivs), i
				i = end
			case c == ':' || c == ',' || c == '-':
				return Set{}, newParseError(s, i, "empty tag or interval")
			default:
				return Set{}, newParseError(s, i, "expected an interval or a tag")
			}
			items++
		}
		if len(ivs) == segStart {
			if tagPos >= 0 {
				return Set{}, newParseError(s, tagPos, "tag has no interval after it")
			}
			return Set{}, newParseError(s, uuidPos, "UUID has no interval after it")
		}
		srcs = append(srcs, source{key: key, ivs: ivs[segStart:len(ivs):len(ivs)]})
		i = skipWS(s, i)
		if i < len(s) {
			if s[i] != ',' {
				return Set{}, newParseError(s, i, "expected ',' or ':'")
			}
			i = skipWS(s, i+1)
		}
	}
	return normalize(srcs), nil
}

// normalize restores the invariants on sources whose interval slices are
// distinct regions (cap-limited) of memory owned by the caller.
func normalize(srcs []source) Set {
	if len(srcs) == 0 {
		return Set{}
	}
	for k := range srcs {
		srcs[k].ivs = normalizeIvs(srcs[k].ivs)
	}
	sorted := true
	for k := 1; k < len(srcs); k++ {
		if srcs[k-1].key.compare(srcs[k].key) >= 0 {
			sorted = false
			break
		}
	}
	if !sorted {
		slices.SortStableFunc(srcs, func(a, b source) int { return a.key.compare(b.key) })
		out := srcs[:1]
		for _, src := range srcs[1:] {
			last := &out[len(out)-1]
			if last.key == src.key {
				last.ivs = unionIvs(make([]Interval, 0, len(last.ivs)+len(src.ivs)), last.ivs, src.ivs)
				continue
			}
			out = append(out, src)
		}
		srcs = out
	}
	return Set{srcs: srcs}
}

// normalizeIvs sorts and merges intervals in place, returning the prefix.
func normalizeIvs(ivs []Interval) []Interval {
	ok := true
	for k := 1; k < len(ivs); k++ {
		if ivs[k-1].End >= ivs[k].Start-1 {
			ok = false
			break
		}
	}
	if ok {
		return ivs
	}
	slices.SortFunc(ivs, func(a, b Interval) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	out := ivs[:1]
	for _, x := range ivs[1:] {
		last := &out[len(out)-1]
		if last.End >= x.Start-1 {
			last.End = max(last.End, x.End)
			continue
		}
		out = append(out, x)
	}
	return out[:len(out):len(out)]
}
