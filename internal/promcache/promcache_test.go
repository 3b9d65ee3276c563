package promcache

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountersSameChildren(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	c := New(vec, 4)
	if n := testutil.CollectAndCount(vec); n != 0 {
		t.Fatalf("a new cache created %d series", n)
	}
	for range 3 {
		c.Get(1, "p", "q").Inc()
	}
	c.Get(2, "p", "r").Add(2)
	if got := testutil.ToFloat64(vec.WithLabelValues("p", "q")); got != 3 {
		t.Errorf("p,q = %v, want 3", got)
	}
	if got := testutil.ToFloat64(vec.WithLabelValues("p", "r")); got != 2 {
		t.Errorf("p,r = %v, want 2", got)
	}
	if c.Get(1, "p", "q") != vec.WithLabelValues("p", "q") {
		t.Error("the cached child is not the vector's")
	}
	if n := testutil.CollectAndCount(vec); n != 2 {
		t.Errorf("%d series, want the 2 used", n)
	}
}

func BenchmarkGet(b *testing.B) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b", "c"})
	c := New(vec, 1)
	b.Run("cache", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Get(0, "token-ryw-mr", "replica", "routed").Inc()
		}
	})
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			vec.WithLabelValues("token-ryw-mr", "replica", "routed").Inc()
		}
	})
}
