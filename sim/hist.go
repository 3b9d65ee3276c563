package sim

import "math/bits"

// hist is a log-linear histogram of non-negative microsecond values: exact
// below 128 µs, then 64 sub-buckets per power of two (relative error under
// 0.8%). It has a fixed size, so adding never allocates; the sum is exact.
type hist struct {
	n      uint64
	sum    int64
	max    int64
	counts [histBuckets]uint64
}

const histBuckets = 128 + 57*64

func histIndex(v int64) int {
	if v < 128 {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	s := bits.Len64(uint64(v)) - 7
	top := v >> uint(s)
	return 128 + (s-1)*64 + int(top-64)
}

// bucketMid is the middle of bucket i, the value a quantile reports.
func bucketMid(i int) float64 {
	if i < 128 {
		return float64(i)
	}
	s := (i-128)/64 + 1
	top := int64((i-128)%64 + 64)
	lo := top << uint(s)
	return float64(lo) + float64(int64(1)<<uint(s))/2
}

func (h *hist) reset() { *h = hist{} }

func (h *hist) add(v int64) {
	if v < 0 {
		v = 0
	}
	h.n++
	h.sum += v
	if v > h.max {
		h.max = v
	}
	h.counts[histIndex(v)]++
}

// merge adds every value of o.
func (h *hist) merge(o *hist) {
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
}

// mean in microseconds (0 when empty).
func (h *hist) mean() float64 {
	if h.n == 0 {
		return 0
	}
	return float64(h.sum) / float64(h.n)
}

// quantile q in [0,1] in microseconds (0 when empty): the middle of the
// bucket holding the ceil(q·n)-th value, capped at the exact maximum.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) {
		rank++
	}
	if rank < 1 {
		rank = 1
	}
	var c uint64
	for i := range h.counts {
		c += h.counts[i]
		if c >= rank {
			m := bucketMid(i)
			if m > float64(h.max) {
				m = float64(h.max)
			}
			return m
		}
	}
	return float64(h.max)
}
