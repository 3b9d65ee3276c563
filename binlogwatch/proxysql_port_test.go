package binlogwatch

// Ports of ProxySQL's binlog-reader client (GTID_Server_Data), in Go, for
// tests only: they are the judge of what ProxySQLServer writes. Each keeps
// the C++ semantics that decide what ProxySQL ends up believing: the read
// buffer (1 KiB, doubled when full, compacted after a pass), lines cut at
// '\n' by memchr, strtok_r (empty fields skipped), sscanf/atoll/strtoll
// number parsing, the fixed char arrays (uuid_server[64], rec_msg[80]), what
// survives a reconnect, and every condition that disconnects. Where the C++
// has undefined behaviour (a buffer overflow, a read of an uninitialised
// variable, a NULL dereference) the port does not guess: it stops with an
// *ubError naming it.
//
// Versions ported:
//
//   - psql2: sysown/proxysql tag v2.7.1 (commit 2726c277102cde7555a36aeece60179c9f4e23e5),
//     lib/GTID_Server_Data.cpp: read_next_gtid, addGtid, dump, readall,
//     reader_cb; lib/MySQL_HostGroups_Manager.cpp gtid_exists. The same file
//     is byte-identical at tags 2.7.2, 3.0.0 and 3.0.1 (checked in the
//     fetched repository).
//   - psql308: the 3.0.8 line (PRs #5557 "Add support for GTID Range" and
//     #5661 "Fix GTID range validation for 3.0.8 review"): lib/GTID_Server_Data.cpp
//     as stored by the search index under id 60790943635 (the index gives no
//     commit for it; it has I3/I4, TrxId_Interval::parse, the j%2 bootstrap
//     check, no id-flavor check, no oversize check, no reset on reconnect),
//     with lib/proxysql_gtid.cpp at commit 01562df6b9683e17ee0f4a2c879b896fea21ab41
//     (TrxId_Interval::parse, GTID_Set::add, has_gtid).
//   - psql3: the newest stored lib/GTID_Server_Data.cpp, commit
//     03bbb904e422735b7ef554ec0b8abf1bf30c94bc: adds the id-flavor check
//     (detect_id_flavor, accept_id_flavor, copy_gtid_reader_id), the
//     oversized-line disconnect, I2/I4 refused before any id, and
//     reset_reader_stream on every new connection (issue #6334); same
//     proxysql_gtid.cpp.
//
// What survives a disconnect: in psql2 reader_cb deletes the
// GTID_Server_Data (its set, uuid_server and buffer are gone; a new one
// starts from nothing). In psql308 and psql3 the object stays in gtid_map:
// the set survives (a new ST= is added to it; nothing is ever removed); in
// psql308 also uuid_server and the unread bytes of the old connection.

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/causallab/causallab/gtid"
)

type psqlVersion int

const (
	psql2 psqlVersion = iota
	psql308
	psql3
)

func (v psqlVersion) String() string {
	return [...]string{"2.x", "3.0.8", "3.x"}[v]
}

var psqlVersions = []psqlVersion{psql2, psql308, psql3}

// ubError: the C++ would have undefined behaviour here.
type ubError struct{ what string }

func (e *ubError) Error() string { return "undefined behaviour in ProxySQL: " + e.what }

// disconnectError: ProxySQL would close the connection (active = false).
type disconnectError struct{ why string }

func (e *disconnectError) Error() string { return "ProxySQL disconnects: " + e.why }

// trxIv is a TrxId_Interval (3.x) or a gtid_interval_t pair (2.x).
type trxIv struct{ start, end int64 }

// psqlReader is one GTID_Server_Data.
type psqlReader struct {
	ver psqlVersion

	// read buffer: data[:size] allocated, bytes [pos, n) unread.
	data   []byte
	n, pos int

	uuidServer [64]byte
	flavor     int // psql3 gtid_flavor: 0 unknown, 1 UUID, 2 domain
	set        map[string][]trxIv
	eventsRead uint64
	active     bool
	lines      int // lines read
	st         int // ST= lines read
}

const (
	flavorUnknown = 0
	flavorUUID    = 1
	flavorDomain  = 2
)

func newPSQLReader(v psqlVersion) *psqlReader {
	return &psqlReader{ver: v, data: make([]byte, 1024), set: map[string][]trxIv{}, active: true}
}

// reconnect models ProxySQL opening a new connection to the reader after
// the previous one ended (for whatever reason).
func (r *psqlReader) reconnect() {
	switch r.ver {
	case psql2:
		*r = *newPSQLReader(psql2) // reader_cb deleted it; new_connector makes a new one
	case psql308:
		r.active = true // same object: set, uuid_server and unread bytes kept
	case psql3:
		r.active = true
		r.flavor = flavorUnknown // reset_reader_stream
		r.uuidServer = [64]byte{}
		r.pos, r.n = 0, 0
	}
}

// feed delivers bytes as successive read() calls would (each at most the
// free space of the buffer), running dump() after each. It returns the
// first error: a disconnect or undefined behaviour.
func (r *psqlReader) feed(p []byte) error {
	for len(p) > 0 {
		if !r.active {
			return &disconnectError{"bytes after the connection was closed"}
		}
		if len(r.data) == r.n { // readall: buffer full, expand
			nd := make([]byte, 2*r.n)
			copy(nd, r.data)
			r.data = nd
		}
		k := copy(r.data[r.n:], p)
		r.n += k
		p = p[k:]
		if err := r.dump(); err != nil {
			return err
		}
	}
	return nil
}

func (r *psqlReader) dump() error {
	if r.n == 0 {
		return nil
	}
	for {
		more, err := r.readNext()
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if r.pos >= r.n/2 {
		copy(r.data, r.data[r.pos:r.n])
		r.n -= r.pos
		r.pos = 0
	}
	return nil
}

// cstr is the C string at b: up to the first NUL.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// strtok returns the fields strtok_r would: split at any delimiter byte,
// empty fields skipped.
func strtok(s []byte, delim byte) [][]byte {
	var out [][]byte
	for _, f := range bytes.Split(s, []byte{delim}) {
		if len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

func isCSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

// cStrtoull is glibc strtoul/strtoull (base 10) on s: leading white space,
// optional sign (a '-' negates in unsigned arithmetic), digits, saturating
// at ULONG_MAX. It returns the value and the bytes consumed (0: no number).
func cStrtoull(s []byte) (uint64, int) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var v uint64
	over := false
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		d := uint64(s[i] - '0')
		if v > (math.MaxUint64-d)/10 {
			over = true
		}
		v = v*10 + d
		i++
	}
	if i == start {
		return 0, 0
	}
	if over {
		return math.MaxUint64, i
	}
	if neg {
		v = -v
	}
	return v, i
}

// cStrtoll is glibc strtoll (base 10): saturates at LLONG_MIN/LLONG_MAX
// (errno ERANGE). ok is false when no digit was read.
func cStrtoll(s []byte) (v int64, n int, erange bool) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var u uint64
	over := false
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		d := uint64(s[i] - '0')
		if u > (math.MaxUint64-d)/10 {
			over = true
		} else {
			u = u*10 + d
		}
		i++
	}
	if i == start {
		return 0, 0, false
	}
	switch {
	case !neg && (over || u > math.MaxInt64):
		return math.MaxInt64, i, true
	case neg && (over || u > 1<<63):
		return math.MinInt64, i, true
	case neg:
		return int64(-u), i, false
	}
	return int64(u), i, false
}

// cAtoll is glibc atoll (strtoll, errors ignored).
func cAtoll(s []byte) int64 {
	v, _, _ := cStrtoll(s)
	return v
}

// sscanfRange is sscanf(s, "%lu-%lu", &a, &b): it returns how many
// conversions were assigned.
func sscanfRange(s []byte) (a, b uint64, assigned int) {
	a, n := cStrtoull(s)
	if n == 0 {
		return 0, 0, 0
	}
	s = s[n:]
	if len(s) == 0 || s[0] != '-' {
		return a, 0, 1
	}
	b, n = cStrtoull(s[1:])
	if n == 0 {
		return a, 0, 1
	}
	return a, b, 2
}

// parseTrxIv is TrxId_Interval::parse (proxysql_gtid.cpp, 3.0.8+): a
// component must start with a digit and fit strtoll without ERANGE; "a" or
// "a-b" and nothing after; the interval is swapped if reversed.
func parseTrxIv(s []byte) (trxIv, bool) {
	comp := func(p []byte) (int64, int, bool) {
		if len(p) == 0 || p[0] < '0' || p[0] > '9' {
			return 0, 0, false
		}
		v, n, erange := cStrtoll(p)
		if n == 0 || erange || v < 0 {
			return 0, 0, false
		}
		return v, n, true
	}
	a, n, ok := comp(s)
	if !ok {
		return trxIv{}, false
	}
	s = s[n:]
	b := a
	if len(s) > 0 && s[0] == '-' {
		if b, n, ok = comp(s[1:]); !ok {
			return trxIv{}, false
		}
		s = s[1+n:]
	}
	if len(s) != 0 {
		return trxIv{}, false
	}
	if a > b {
		a, b = b, a
	}
	return trxIv{a, b}, true
}

// uuidString is std::string(uuid_server): up to the NUL, which must be in
// the array.
func (r *psqlReader) uuidString() (string, error) {
	i := bytes.IndexByte(r.uuidServer[:], 0)
	if i < 0 {
		return "", &ubError{"uuid_server[64] holds no NUL: std::string reads past it"}
	}
	return string(r.uuidServer[:i]), nil
}

// recMsg models char rec_msg[80] after the copy of an l-byte line: the C
// string at offset off is defined only up to the NUL at l.
type recMsg struct {
	b []byte // bytes [0, l] of rec_msg, b[l] == 0
}

func (m recMsg) str(off int) ([]byte, error) {
	if off > len(m.b)-1 {
		return nil, &ubError{fmt.Sprintf("reads rec_msg+%d past the NUL at %d: uninitialised stack bytes", off, len(m.b)-1)}
	}
	return cstr(m.b[off:]), nil
}

func (m recMsg) at(i int) byte {
	if i < len(m.b) {
		return m.b[i]
	}
	return 0 // only reached after a NUL: callers read rec_msg[1] when rec_msg[0]=='I'
}

func (r *psqlReader) readNext() (bool, error) {
	if r.n == 0 {
		return false, nil
	}
	nl := bytes.IndexByte(r.data[r.pos:r.n], '\n')
	if nl < 0 {
		return false, nil
	}
	l := nl
	line := r.data[r.pos : r.pos+l]
	r.lines++
	// strncmp(data+pos, "ST=", 3): a shorter line ends in '\n', a mismatch.
	if bytes.HasPrefix(r.data[r.pos:r.pos+l+1], []byte("ST=")) {
		bs := cstr(slices.Clone(line[3:])) // malloc, memcpy, strtok stops at a NUL
		r.pos += l + 1
		r.st++
		if r.ver == psql2 {
			return true, r.bootstrap2(bs)
		}
		return r.bootstrap3(bs)
	}
	if l >= 80 {
		if r.ver == psql3 {
			r.pos += l + 1
			r.active = false
			return false, &disconnectError{fmt.Sprintf("oversized message (%d bytes)", l)}
		}
		return false, &ubError{fmt.Sprintf("strncpy of a %d-byte line into rec_msg[80]", l)}
	}
	var m recMsg
	if r.ver == psql3 {
		m.b = append(slices.Clone(line), 0) // memcpy
	} else {
		c := cstr(line) // strncpy: stops at a NUL, pads with NULs
		m.b = append(append(slices.Clone(c), make([]byte, l-len(c))...), 0)
	}
	r.pos += l + 1
	if m.at(0) != 'I' {
		return true, nil
	}
	if r.ver == psql2 {
		return true, r.increment2(m)
	}
	return r.increment3(m)
}

// --- 2.x -------------------------------------------------------------------

func (r *psqlReader) bootstrap2(bs []byte) error {
	for _, token := range strtok(bs, ',') {
		for j, sub := range strtok(token, ':') {
			if (j+1)%2 == 1 { // the uuid: dashes stripped, no NUL written
				k := 0
				for _, c := range sub {
					if c == '-' {
						continue
					}
					if k >= len(r.uuidServer) {
						return &ubError{"ST uuid field overflows uuid_server[64]"}
					}
					r.uuidServer[k] = c
					k++
				}
				continue
			}
			from, to, assigned := sscanfRange(sub)
			if assigned < 2 {
				return &ubError{fmt.Sprintf("sscanf(%q, \"%%lu-%%lu\") assigned %d of 2: trx_to (and maybe trx_from) uninitialised", sub, assigned)}
			}
			s, err := r.uuidString()
			if err != nil {
				return err
			}
			r.set[s] = append(r.set[s], trxIv{int64(from), int64(to)}) // emplace_back, no merge
		}
	}
	return nil
}

func (r *psqlReader) increment2(m recMsg) error {
	var trxid uint64
	switch m.at(1) {
	case '1':
		rest, err := m.str(3)
		if err != nil {
			return err
		}
		a := bytes.IndexByte(rest, ':')
		if a < 0 {
			return &ubError{"I1 without ':': strchr returns NULL and the length computed from it is wild"}
		}
		if a >= len(r.uuidServer) {
			return &ubError{fmt.Sprintf("I1 uuid of %d bytes overflows uuid_server[64]", a)}
		}
		copy(r.uuidServer[:], rest[:a])
		r.uuidServer[a] = 0
		trxid = uint64(cAtoll(rest[a+1:]))
	case '2':
		rest, err := m.str(3)
		if err != nil {
			return err
		}
		trxid = uint64(cAtoll(rest))
	default: // I3, I4, ...: rec_trxid stays 0
	}
	s, err := r.uuidString()
	if err != nil {
		return err
	}
	r.set[s] = addGtid2(r.set[s], int64(trxid))
	r.eventsRead++
	return nil
}

// addGtid2 is addGtid (GTID_Server_Data.cpp, v2.7.1), from libslave.
func addGtid2(l []trxIv, g int64) []trxIv {
	if l == nil {
		return []trxIv{{g, g}}
	}
	flag := true
	for i := range l {
		if g >= l[i].start && g <= l[i].end {
			return l
		}
		if g+1 == l[i].start {
			l[i].start--
			flag = false
			break
		} else if g == l[i].end+1 {
			l[i].end++
			flag = false
			break
		} else if g < l[i].start {
			return slices.Insert(l, i, trxIv{g, g})
		}
	}
	if flag {
		l = append(l, trxIv{g, g})
	}
	for i := 0; i+1 < len(l); i++ {
		if l[i].end+1 == l[i+1].start {
			l[i].end = l[i+1].end
			l = slices.Delete(l, i+1, i+2)
			break
		}
	}
	return l
}

// --- 3.0.8 and later -------------------------------------------------------

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// detectFlavor is detect_id_flavor (psql3).
func detectFlavor(id []byte) int {
	if len(id) == 0 {
		return flavorUnknown
	}
	onlyDigits := true
	hexDigits := 0
	for _, c := range id {
		if c >= '0' && c <= '9' {
			hexDigits++
			continue
		}
		onlyDigits = false
		if c == '-' {
			continue
		}
		if !isHex(c) {
			return flavorUnknown
		}
		hexDigits++
	}
	if hexDigits == 32 {
		return flavorUUID
	}
	if onlyDigits && canonicalDomain(id) {
		return flavorDomain
	}
	return flavorUnknown
}

// canonicalDomain is is_canonical_mariadb_domain_id: digits, no leading
// zero unless "0", at most UINT32_MAX.
func canonicalDomain(id []byte) bool {
	if len(id) == 0 || len(id) > 10 || (len(id) > 1 && id[0] == '0') {
		return false
	}
	var v uint64
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
		v = v*10 + uint64(c-'0')
	}
	return v <= math.MaxUint32
}

func (r *psqlReader) acceptFlavor(candidate int) bool {
	if candidate == flavorUnknown {
		return false
	}
	if r.flavor == flavorUnknown {
		r.flavor = candidate
		return true
	}
	return r.flavor == candidate
}

// copyReaderID is copy_gtid_reader_id (psql3): false when it does not fit.
func (r *psqlReader) copyReaderID(sub []byte) bool {
	w := 0
	allDigits := true
	for _, c := range sub {
		if c < '0' || c > '9' {
			allDigits = false
		}
	}
	if allDigits {
		if len(sub)+1 >= len(r.uuidServer) {
			return false
		}
		w = copy(r.uuidServer[:], sub)
	} else {
		for _, c := range sub {
			if c == '-' {
				continue
			}
			if w+1 >= len(r.uuidServer) {
				return false
			}
			r.uuidServer[w] = c
			w++
		}
	}
	r.uuidServer[w] = 0
	return true
}

func (r *psqlReader) bootstrap3(bs []byte) (bool, error) {
	invalid := false
	updated := false
	for _, token := range strtok(bs, ',') {
		subs := strtok(token, ':')
		j := 0
		for _, sub := range subs {
			j++
			if j%2 == 1 {
				if r.ver == psql3 {
					if !r.acceptFlavor(detectFlavor(sub)) || !r.copyReaderID(sub) {
						invalid = true
						break
					}
					continue
				}
				k := 0 // 3.0.8: dashes stripped, NUL-terminated, unchecked
				for _, c := range sub {
					if c == '-' {
						continue
					}
					if k >= len(r.uuidServer)-1 {
						return false, &ubError{"ST uuid field overflows uuid_server[64]"}
					}
					r.uuidServer[k] = c
					k++
				}
				r.uuidServer[k] = 0
				continue
			}
			iv, ok := parseTrxIv(sub)
			if !ok {
				invalid = true
				break
			}
			s, err := r.uuidString()
			if err != nil {
				return false, err
			}
			updated = r.add3(s, iv) || updated
		}
		if invalid || j == 0 || j%2 != 0 {
			invalid = true
			break
		}
	}
	if invalid {
		r.active = false
		return false, &disconnectError{"invalid bootstrap message"}
	}
	if updated {
		r.eventsRead++
	}
	return true, nil
}

func (r *psqlReader) increment3(m recMsg) (bool, error) {
	bad := func(why string) (bool, error) {
		r.active = false
		return false, &disconnectError{fmt.Sprintf("invalid or unsupported message (%s): %s", m.b[:len(m.b)-1], why)}
	}
	// withID handles the "<id>:" prefix of I1 and I3 and returns the rest.
	withID := func() ([]byte, error, bool) {
		rest, err := m.str(3)
		if err != nil {
			return nil, err, false
		}
		a := bytes.IndexByte(rest, ':')
		if a < 0 {
			return nil, nil, false
		}
		if r.ver == psql3 {
			if !r.acceptFlavor(detectFlavor(rest[:a])) || a >= len(r.uuidServer) {
				return nil, nil, false
			}
		} else if a >= len(r.uuidServer) {
			return nil, &ubError{fmt.Sprintf("uuid of %d bytes overflows uuid_server[64]", a)}, false
		}
		copy(r.uuidServer[:], rest[:a])
		r.uuidServer[a] = 0
		return rest[a+1:], nil, true
	}
	switch m.at(1) {
	case '1', '3':
		rest, err, ok := withID()
		if err != nil {
			return false, err
		}
		if !ok {
			return bad("no valid id")
		}
		s, err := r.uuidString()
		if err != nil {
			return false, err
		}
		if m.at(1) == '1' {
			g := cAtoll(rest)
			r.add3(s, trxIv{g, g})
		} else {
			iv, ok := parseTrxIv(rest)
			if !ok {
				return bad("bad range")
			}
			r.add3(s, iv)
		}
		r.eventsRead++
	case '2', '4':
		if r.ver == psql3 && r.flavor == flavorUnknown {
			return bad("no id yet to reuse")
		}
		rest, err := m.str(3)
		if err != nil {
			return false, err
		}
		s, err := r.uuidString()
		if err != nil {
			return false, err
		}
		if m.at(1) == '2' {
			g := cAtoll(rest)
			r.add3(s, trxIv{g, g})
		} else {
			iv, ok := parseTrxIv(rest)
			if !ok {
				return bad("bad range")
			}
			r.add3(s, iv)
		}
		r.eventsRead++
	default:
		return bad("unknown type")
	}
	return true, nil
}

// TrxId_Interval::contains, ::append, ::merge and GTID_Set::add
// (proxysql_gtid.cpp at 01562df6). Signed overflow of start-1 / end+1 is
// undefined in C++ and wraps here; GNOs stay below MaxInt64 in MySQL.
func (a trxIv) contains(o trxIv) bool { return o.start >= a.start && o.end <= a.end }

func (a *trxIv) append(o trxIv) bool {
	if o.start >= a.start && o.end >= a.end && o.start <= a.end+1 {
		a.end = o.end
		return true
	}
	return false
}

func (a *trxIv) merge(o trxIv) bool {
	switch {
	case o.start >= a.start && o.end <= a.end:
		return true
	case o.start <= a.start && o.end >= a.end:
		a.start, a.end = o.start, o.end
		return true
	case o.start <= a.start && o.end >= a.start-1:
		a.start = o.start
		return true
	case o.end >= a.end && o.start <= a.end+1:
		a.end = o.end
		return true
	}
	return false
}

func (r *psqlReader) add3(uuid string, iv trxIv) bool {
	l, ok := r.set[uuid]
	if !ok {
		r.set[uuid] = []trxIv{iv}
		return true
	}
	if len(l) > 0 {
		last := &l[len(l)-1]
		if last.contains(iv) {
			return false
		}
		if last.append(iv) {
			return true
		}
	}
	merged := false
	for i := range l {
		if l[i].contains(iv) {
			return false
		}
		if l[i].merge(iv) {
			merged = true
			break
		}
	}
	if !merged {
		l = append(l, iv)
	}
	// std::list::sort is stable, by (start, end).
	slices.SortStableFunc(l, func(a, b trxIv) int {
		if a.start != b.start {
			if a.start < b.start {
				return -1
			}
			return 1
		}
		if a.end < b.end {
			return -1
		} else if a.end > b.end {
			return 1
		}
		return 0
	})
	for i := 0; i+1 < len(l); {
		if l[i].merge(l[i+1]) {
			l = slices.Delete(l, i+1, i+2)
			continue
		}
		i++
	}
	r.set[uuid] = l
	return true
}

// hasGTID is gtid_exists / GTID_Set::has_gtid: is gno in any interval of uuid?
func (r *psqlReader) hasGTID(uuid string, gno int64) bool {
	for _, iv := range r.set[uuid] {
		if gno >= iv.start && gno <= iv.end {
			return true
		}
	}
	return false
}

// believed returns what ProxySQL believes, as a gtid.Set (membership is
// what gtid_exists answers: any interval holding the GNO; reversed 2.x
// pairs hold nothing), and the beliefs a gtid.Set cannot hold (a key that
// is not a UUID, a GNO below 1). Only ids ProxySQL can be asked about
// count: a query's UUID is 32 hex digits, lower case as MySQL prints it.
func (r *psqlReader) believed() (gtid.Set, []string) {
	var b strings.Builder
	var odd []string
	for key, ivs := range r.set {
		sid, err := gtid.ParseSID(key)
		valid := err == nil && len(key) == 32 && key == strings.ToLower(key)
		for _, iv := range ivs {
			if iv.start > iv.end {
				continue
			}
			lo, hi := iv.start, iv.end
			if lo < 1 {
				odd = append(odd, fmt.Sprintf("%q:%d-%d", key, lo, hi))
				if hi < 1 {
					continue
				}
				lo = 1
			}
			if !valid {
				odd = append(odd, fmt.Sprintf("%q:%d-%d", key, lo, hi))
				continue
			}
			if hi > gtid.MaxGNO {
				odd = append(odd, fmt.Sprintf("%s:%d-%d", key, gtid.MaxGNO+1, hi))
				if lo > gtid.MaxGNO {
					continue
				}
				hi = gtid.MaxGNO
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s:%d-%d", sid, lo, hi)
		}
	}
	slices.Sort(odd)
	set, err := gtid.Parse(b.String())
	if err != nil {
		panic(err) // built from valid parts
	}
	return set, odd
}
