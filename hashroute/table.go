// Package hashroute implements ProxySQL-style consistent_read_id hashing: an
// application tags related reads with `/* consistent_read_id:<id> */`, the id
// is hashed (xxhash64) and mapped by cumulative weight onto the FULL
// configured server list, so every read of the sequence lands on the same
// replica (Shopify's hash-based monotonic reads).
//
// Three selection modes exist, one correct and two deliberately broken ones
// that reproduce the bugs Shopify found in review and in testing:
//
//   - FullList (default, correct): index into the full configured list; only
//     when that first choice is down, reselect deterministically among the
//     others. Only ids whose first choice is down move, and they return when
//     it comes back.
//   - AvailableOnly (bug 1): modulo over the servers that are up now, so one
//     server going down remaps ids on every server.
//   - RebalanceOverride (bug 2): FullList, then a ProxySQL-style load
//     rebalancer moves the request away from a server whose share of
//     in-flight work exceeds its weight share by a factor (1.5 by default).
//
// The package is pure: no I/O, no clocks, no globals. Select is
// allocation-free and safe for concurrent use (a Table is immutable).
// See docs/hashroute.md for the design and the documented edge cases.
package hashroute

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// MaxServers is the largest configured server list a Table accepts, so that
// an Availability bitmask fits in one uint64.
const MaxServers = 64

// MaxWeight is the largest weight of one server. It keeps the total weight and
// the rebalancer's products far from overflow.
const MaxWeight = 1 << 24

// DefaultRebalanceFactor is the RebalanceOverride factor used when
// Config.RebalanceFactor is zero (ProxySQL's constant).
const DefaultRebalanceFactor = 1.5

// MaxProbes bounds the probe sequence of a reselection. After MaxProbes
// probes without an up server, the list is scanned cyclically from the first
// choice (see docs/hashroute.md); both steps are part of one fixed per-id
// order, so the consistency properties hold either way.
const MaxProbes = 1024

// Hash returns the 64-bit hash of a consistent_read_id (xxhash64, seed 0).
// It does not allocate.
func Hash(id string) uint64 { return xxhash.Sum64String(id) }

// HashBytes is Hash for a byte slice.
func HashBytes(id []byte) uint64 { return xxhash.Sum64(id) }

// Server is one configured server.
type Server struct {
	// Name identifies the server (unique, non-empty). It is not hashed: only
	// the position in the list and the weight decide where ids go.
	Name string `json:"name"`
	// Weight is the server's share of ids relative to the others, 1..MaxWeight.
	Weight int `json:"weight"`
}

// Config configures a Table.
type Config struct {
	// Servers is the configured server list in order (1..MaxServers entries).
	// The order is part of the mapping: the same list in another order sends
	// ids elsewhere. Index i of the list is bit i of an Availability.
	Servers []Server
	// RebalanceFactor is used by RebalanceOverride only: a request is moved
	// away from its server when that server's share of in-flight work exceeds
	// factor × its weight share. Zero means DefaultRebalanceFactor; otherwise
	// it must be at least 1 and finite.
	RebalanceFactor float64
}

// validate fills defaults and rejects nonsense.
func (c *Config) validate() error {
	if len(c.Servers) == 0 {
		return errors.New("hashroute: no servers configured")
	}
	if len(c.Servers) > MaxServers {
		return fmt.Errorf("hashroute: %d servers configured, at most %d supported", len(c.Servers), MaxServers)
	}
	seen := make(map[string]int, len(c.Servers))
	for i, s := range c.Servers {
		if s.Name == "" {
			return fmt.Errorf("hashroute: server %d has an empty name", i)
		}
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("hashroute: server name %q appears twice (positions %d and %d)", s.Name, j, i)
		}
		seen[s.Name] = i
		if s.Weight < 1 || s.Weight > MaxWeight {
			return fmt.Errorf("hashroute: server %q has weight %d, want 1..%d", s.Name, s.Weight, MaxWeight)
		}
	}
	if c.RebalanceFactor == 0 {
		c.RebalanceFactor = DefaultRebalanceFactor
	}
	if !(c.RebalanceFactor >= 1) || c.RebalanceFactor > 1e9 {
		return fmt.Errorf("hashroute: rebalance factor %v, want a finite number >= 1", c.RebalanceFactor)
	}
	return nil
}

// Table is the selection table built once from the configured servers. It is
// immutable and safe for concurrent use.
type Table struct {
	servers []Server
	weights []uint64 // weights[i] = servers[i].Weight
	cum     []uint64 // cum[i] = weights[0] + ... + weights[i]
	total   uint64   // cum[n-1]
	all     Availability
	factor  float64
}

// New builds a Table from cfg.
func New(cfg Config) (*Table, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := len(cfg.Servers)
	t := &Table{
		servers: append([]Server(nil), cfg.Servers...),
		weights: make([]uint64, n),
		cum:     make([]uint64, n),
		all:     AllUp(n),
		factor:  cfg.RebalanceFactor,
	}
	var sum uint64
	for i, s := range cfg.Servers {
		t.weights[i] = uint64(s.Weight)
		sum += uint64(s.Weight)
		t.cum[i] = sum
	}
	t.total = sum
	return t, nil
}

// NewTable builds a Table with the default rebalance factor.
func NewTable(servers []Server) (*Table, error) { return New(Config{Servers: servers}) }

// Len is the number of configured servers.
func (t *Table) Len() int { return len(t.servers) }

// Server returns configured server i.
func (t *Table) Server(i int) Server { return t.servers[i] }

// Servers returns a copy of the configured list.
func (t *Table) Servers() []Server { return append([]Server(nil), t.servers...) }

// Index returns the position of the named server.
func (t *Table) Index(name string) (int, bool) {
	for i, s := range t.servers {
		if s.Name == name {
			return i, true
		}
	}
	return -1, false
}

// RebalanceFactor is the factor RebalanceOverride uses.
func (t *Table) RebalanceFactor() float64 { return t.factor }

// AllUp is the Availability with every configured server up.
func (t *Table) AllUp() Availability { return t.all }

// Availability is a bitmask of up servers: bit i set means configured server
// i is up. Bits at or above Table.Len() are ignored.
type Availability uint64

// AllUp returns the Availability with servers 0..n-1 up (n is clamped to
// 0..MaxServers).
func AllUp(n int) Availability {
	if n <= 0 {
		return 0
	}
	if n >= MaxServers {
		return ^Availability(0)
	}
	return Availability(1)<<uint(n) - 1
}

// Up reports whether server i is up.
func (a Availability) Up(i int) bool { return i >= 0 && i < MaxServers && a&(1<<uint(i)) != 0 }

// Without returns a with server i marked down.
func (a Availability) Without(i int) Availability {
	if i < 0 || i >= MaxServers {
		return a
	}
	return a &^ (1 << uint(i))
}

// With returns a with server i marked up.
func (a Availability) With(i int) Availability {
	if i < 0 || i >= MaxServers {
		return a
	}
	return a | 1<<uint(i)
}

// Count is the number of up servers in a.
func (a Availability) Count() int { return bits.OnesCount64(uint64(a)) }

// Mode is a selection mode.
type Mode uint8

const (
	// FullList maps the id into the full configured list and reselects only
	// when that first choice is down (the correct scheme, the default).
	FullList Mode = iota
	// AvailableOnly maps the id modulo the servers that are up (bug 1).
	AvailableOnly
	// RebalanceOverride is FullList followed by a load rebalancer that may
	// move the request (bug 2).
	RebalanceOverride
)

// Modes lists every mode in declaration order.
func Modes() []Mode { return []Mode{FullList, AvailableOnly, RebalanceOverride} }

// String returns the mode's flag name: full-list, available-only or
// rebalance-override.
func (m Mode) String() string {
	switch m {
	case FullList:
		return "full-list"
	case AvailableOnly:
		return "available-only"
	case RebalanceOverride:
		return "rebalance-override"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses a mode name as printed by String (case-insensitive,
// surrounding space ignored). The empty string is FullList.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "full-list":
		return FullList, nil
	case "available-only":
		return AvailableOnly, nil
	case "rebalance-override":
		return RebalanceOverride, nil
	}
	return FullList, fmt.Errorf("hashroute: unknown mode %q (want full-list, available-only or rebalance-override)", s)
}

// Reason says why Select returned the server it did.
type Reason uint8

const (
	// NoServerUp: no configured server is up; Select returns index -1.
	NoServerUp Reason = iota
	// FirstChoice: the id's first choice in the full configured list, which
	// is up.
	FirstChoice
	// Reselected: the first choice is down; the id was reselected among the
	// others (its probe sequence). It returns when the first choice is up.
	Reselected
	// Remapped (AvailableOnly only): the first choice is UP but the modulo
	// over the available servers sent the id elsewhere: the first bug.
	Remapped
	// Rebalanced (RebalanceOverride only): the load rebalancer moved the
	// request away from its hashed server: the second bug.
	Rebalanced
)

// String returns the reason's name.
func (r Reason) String() string {
	switch r {
	case NoServerUp:
		return "no-server-up"
	case FirstChoice:
		return "first-choice"
	case Reselected:
		return "reselected-first-choice-down"
	case Remapped:
		return "remapped-by-available-only"
	case Rebalanced:
		return "moved-by-rebalancer"
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Moved reports whether the request did not go to the id's first choice.
func (r Reason) Moved() bool { return r == Reselected || r == Remapped || r == Rebalanced }

// lookup maps v in [0, total) to the server whose cumulative weight range
// holds it.
func (t *Table) lookup(v uint64) int {
	cum := t.cum
	if len(cum) <= 8 {
		for i, c := range cum {
			if v < c {
				return i
			}
		}
		return len(cum) - 1 // unreachable for v < total
	}
	lo, hi := 0, len(cum)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if v < cum[mid] {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// First returns the id's first choice in the full configured list:
// h mod total weight, mapped by cumulative weight. It ignores availability.
func (t *Table) First(h uint64) int { return t.lookup(h % t.total) }

// mix is the splitmix64 finalizer of h advanced p steps: the p-th probe hash.
func mix(h uint64, p uint64) uint64 {
	z := h + p*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// probe returns the server at step p >= 1 of the id's reselection order: the
// full list mapped by weight with a re-mixed hash.
func (t *Table) probe(h uint64, p uint64) int { return t.lookup(mix(h, p) % t.total) }

// fullList is FullList selection with up already masked to the table.
func (t *Table) fullList(h uint64, up Availability) (int, Reason) {
	first := t.First(h)
	if up.Up(first) {
		return first, FirstChoice
	}
	if up == 0 {
		return -1, NoServerUp
	}
	for p := uint64(1); p <= MaxProbes; p++ {
		if i := t.probe(h, p); up.Up(i) {
			return i, Reselected
		}
	}
	// Cyclic scan from the first choice: rare (the up servers hold a tiny
	// share of the weight), still one fixed order per id.
	n := len(t.servers)
	for k := 1; k < n; k++ {
		if i := (first + k) % n; up.Up(i) {
			return i, Reselected
		}
	}
	return -1, NoServerUp // unreachable: up != 0
}

// availableOnly is the first bug: h modulo the up servers' total weight,
// mapped by cumulative weight over the up servers only.
func (t *Table) availableOnly(h uint64, up Availability) (int, Reason) {
	if up == 0 {
		return -1, NoServerUp
	}
	var upTotal uint64
	for m := uint64(up); m != 0; m &= m - 1 {
		upTotal += t.weights[bits.TrailingZeros64(m)]
	}
	v := h % upTotal
	chosen := -1
	var acc uint64
	for m := uint64(up); m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		acc += t.weights[i]
		if v < acc {
			chosen = i
			break
		}
	}
	first := t.First(h)
	switch {
	case chosen == first:
		return chosen, FirstChoice
	case !up.Up(first):
		return chosen, Reselected
	default:
		return chosen, Remapped
	}
}

// overloaded reports whether server i's share of the in-flight work exceeds
// factor × its weight share among the up servers, with the counts and
// weights summed over the up servers.
func (t *Table) overloaded(i int, inflight []int, up Availability) bool {
	var upW uint64
	var total int64
	for m := uint64(up); m != 0; m &= m - 1 {
		j := bits.TrailingZeros64(m)
		upW += t.weights[j]
		total += int64(count(inflight, j))
	}
	if total <= 0 {
		return false
	}
	// inflight[i]/total > factor * w[i]/upW, cross-multiplied.
	return float64(count(inflight, i))*float64(upW) > t.factor*float64(t.weights[i])*float64(total)
}

// count is inflight[i], zero when missing or negative.
func count(inflight []int, i int) int {
	if i >= len(inflight) || inflight[i] < 0 {
		return 0
	}
	return inflight[i]
}

// leastLoaded returns the up server other than skip with the lowest
// in-flight count per unit of weight (ties: lowest index), or -1.
func (t *Table) leastLoaded(skip int, inflight []int, up Availability) int {
	best := -1
	var bc, bw uint64
	for m := uint64(up); m != 0; m &= m - 1 {
		j := bits.TrailingZeros64(m)
		if j == skip {
			continue
		}
		c, w := uint64(count(inflight, j)), t.weights[j]
		// c/w < bc/bw  <=>  c*bw < bc*w  (no overflow: counts < 2^39 in practice,
		// weights < 2^24).
		if best < 0 || c*bw < bc*w {
			best, bc, bw = j, c, w
		}
	}
	return best
}

// Select picks the server for an id hash h under mode, given the up servers
// and, for RebalanceOverride only, the per-server in-flight counts (indexed
// like the configured list; missing or negative entries count as zero; nil
// means no load, so the rebalancer never fires). It returns the server index
// (-1 with NoServerUp when no server is up) and why. Select is pure,
// deterministic across processes and platforms, and allocation-free.
//
// An unknown mode selects like FullList.
func (t *Table) Select(h uint64, mode Mode, up Availability, inflight []int) (int, Reason) {
	up &= t.all
	switch mode {
	case AvailableOnly:
		return t.availableOnly(h, up)
	case RebalanceOverride:
		i, why := t.fullList(h, up)
		if i < 0 || !t.overloaded(i, inflight, up) {
			return i, why
		}
		if j := t.leastLoaded(i, inflight, up); j >= 0 {
			return j, Rebalanced
		}
		return i, why
	default:
		return t.fullList(h, up)
	}
}

// SelectID is Select(Hash(id), ...).
func (t *Table) SelectID(id string, mode Mode, up Availability, inflight []int) (int, Reason) {
	return t.Select(Hash(id), mode, up, inflight)
}

// ParseServers parses a server list of the form "a:1,b:1,c:2" (a missing
// ":weight" means weight 1) and validates it like New.
func ParseServers(s string) ([]Server, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("hashroute: empty server list")
	}
	parts := strings.Split(s, ",")
	out := make([]Server, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		name, w, hasW := strings.Cut(p, ":")
		name = strings.TrimSpace(name)
		weight := 1
		if hasW {
			v, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil {
				return nil, fmt.Errorf("hashroute: server %q: weight %q is not an integer", name, w)
			}
			weight = v
		}
		out = append(out, Server{Name: name, Weight: weight})
	}
	cfg := Config{Servers: out}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// MarshalText encodes the mode as its name (for JSON and YAML configs).
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText decodes a mode name as ParseMode does.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// MarshalText encodes the reason as its name.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }
