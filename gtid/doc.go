// Package gtid implements exact, allocation-conscious algebra over MySQL GTID
// sets (classic "uuid:1-5" and tagged "uuid:tag:1-5" GTIDs, MySQL 8.3+), and
// the session tokens that causal read routing carries between requests.
//
// # The Set type
//
// A Set is a value holding, per source (a server UUID plus an optional tag),
// a list of closed GNO intervals. Every Set, whether parsed, built by an
// operation or converted from go-mysql, satisfies these invariants:
//
//  1. Sources are sorted by (UUID bytes, tag), strictly increasing: a source
//     appears at most once. The untagged source ("" tag) of a UUID sorts
//     before its tagged ones, which sort by tag bytes.
//  2. Tags are normalised to lower case and match [a-z_][a-z0-9_]{0,31}.
//  3. Every source has at least one interval; a source with no transactions
//     is removed, so IsEmpty is len==0 and Equal is structural.
//  4. Intervals are closed [Start, End] with 1 <= Start <= End <= MaxGNO
//     (MaxGNO = 2^63-2, the largest GNO MySQL accepts).
//  5. A source's intervals are sorted and merged: for consecutive intervals
//     a, b: a.End+1 < b.Start (neither overlapping nor adjacent).
//
// Because of these invariants String is canonical: two Sets are equal exactly
// when their strings are equal, and the string is byte for byte what MySQL
// 9.7 prints for the same set (lower-case UUIDs, sources separated by ",\n",
// untagged intervals before the tags of the same UUID).
//
// GTID sets are partially ordered. There is deliberately no "Less": use
// Contains (superset test) and Equal.
//
// # Value semantics and in-place forms
//
// Methods without the InPlace suffix never modify their receiver or argument,
// and their result shares no memory with either. The ...InPlace methods (on
// *Set) mutate the receiver. A Set copied by plain assignment shares storage
// with the original, so Clone a Set before mutating a copy in place. A Set is
// not safe for concurrent mutation; concurrent readers of an unchanging Set
// are fine.
//
// # Tokens
//
// Token (a GTID set plus the topology epoch it was issued in) and LSNToken (a
// scalar position compared by value, plus its epoch) are the two session
// position kinds the router and the lab compare side by side. Both have a
// text form that is safe inside a SQL comment, a cookie value or a job
// payload, and a JSON form.
//
// # Positions
//
// Position[P] is the one position interface of the project: Set (GTID
// sets) and LSN (a scalar position compared by value) satisfy it, and the
// router, its live layer and the simulator are generic over it.
// Contains(other) reports that the receiver includes every transaction of
// other; Union holds both.
package gtid
