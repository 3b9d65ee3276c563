// Package promcache resolves the children of a Prometheus CounterVec once
// per label combination, for hot paths that count every statement: a
// child is looked up by a small integer index (an atomic load) instead of
// hashing its label values and taking the vector's lock on every
// increment. A child is created on its first use, as WithLabelValues
// creates it, so the series a registry exposes are the same.
package promcache

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Counters caches the children of one CounterVec by index.
type Counters struct {
	vec *prometheus.CounterVec
	c   []atomic.Pointer[child]
}

type child struct{ prometheus.Counter }

// New returns a cache of n children of vec (indexes 0 to n-1).
func New(vec *prometheus.CounterVec, n int) *Counters {
	return &Counters{vec: vec, c: make([]atomic.Pointer[child], n)}
}

// Get returns the child at index i, whose label values are lvs: the
// caller maps each combination of label values to one index. The first
// call for i resolves it with WithLabelValues(lvs...). Children must not
// be deleted from the vector (nothing in causallab deletes any).
func (c *Counters) Get(i int, lvs ...string) prometheus.Counter {
	if p := c.c[i].Load(); p != nil {
		return p.Counter
	}
	m := c.vec.WithLabelValues(lvs...)
	c.c[i].Store(&child{m})
	return m
}
