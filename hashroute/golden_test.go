package hashroute

import "testing"

// Golden vectors pin the mapping across processes, platforms and releases.
// The expected values were cross-checked with an independent Python
// implementation of the algorithm in docs/hashroute.md (xxhash64 values from
// the reference implementation). Changing any of them changes where every
// production id goes: do it only on purpose, and say so in the release notes.
func TestGoldenVectors(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:2,d:3,e:1")
	cDown := tab.AllUp().Without(2)
	cases := []struct {
		id        string
		hash      uint64
		first     int // all up
		fullCDown int // full-list with c down
		availCDwn int // available-only with c down
	}{
		{"", 0xef46db3751d8e999, 1, 1, 3},
		{"a", 0xd24ec4f1a98c6e5b, 2, 3, 4},
		{"session-1", 0xb098057f22ed07c3, 2, 3, 3},
		{"job-42", 0x90506800f773fb66, 3, 3, 3},
		{"3f2504e0-4f89-11d3-9a0c-0305e82c3301", 0xda083d6c2c2a5b37, 4, 4, 3},
		{"user:1001", 0x85caa85ae91fa802, 2, 1, 3},
	}
	for _, c := range cases {
		if h := Hash(c.id); h != c.hash {
			t.Errorf("Hash(%q) = %#x, want %#x", c.id, h, c.hash)
			continue
		}
		if got := tab.First(c.hash); got != c.first {
			t.Errorf("%q: First = %d, want %d", c.id, got, c.first)
		}
		if got, _ := tab.Select(c.hash, FullList, cDown, nil); got != c.fullCDown {
			t.Errorf("%q: full-list with c down = %d, want %d", c.id, got, c.fullCDown)
		}
		if got, _ := tab.Select(c.hash, AvailableOnly, cDown, nil); got != c.availCDwn {
			t.Errorf("%q: available-only with c down = %d, want %d", c.id, got, c.availCDwn)
		}
	}
	// The probe mix is splitmix64: mix(0, 1) is splitmix64's first output for
	// seed 0, a published constant.
	if got := mix(0, 1); got != 0xe220a8397b1dcdaf {
		t.Errorf("mix(0,1) = %#x, want splitmix64's 0xe220a8397b1dcdaf", got)
	}
	for p, want := range []uint64{0xf36cf1164265dd51, 0x22118258a9d111a0, 0x346edce5f713f8ed, 0x1e9a57bc80e6721d} {
		if got := mix(12345, uint64(p)); got != want {
			t.Errorf("mix(12345, %d) = %#x, want %#x", p, got, want)
		}
	}
}
