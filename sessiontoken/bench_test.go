package sessiontoken

import (
	"strings"
	"testing"

	"github.com/causallab/causallab/gtid"
)

// BenchmarkSign is what the proxy pays to sign a session's token, as it
// does for SELECT @causal_token and for every OK packet after which the
// token changed (track_token, to a client that tracks session state): a
// token of two sources' writes and three sources' seen, compacted as the
// proxy's start token is (one interval per source).
//
//	go test -run '^$' -bench . -benchmem ./sessiontoken/
func BenchmarkSign(b *testing.B) {
	kr, err := NewKeyring(Key{ID: "k2", Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		b.Fatal(err)
	}
	w := gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-81234,4e11fa47-71ca-11e1-9e33-c80aa9429562:1-77")
	s := gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-81240,4e11fa47-71ca-11e1-9e33-c80aa9429562:1-77,5e11fa47-71ca-11e1-9e33-c80aa9429562:1-9")
	t := Token{Epoch: 3, Writes: w, SeenEpoch: 3, Seen: s}
	b.ReportAllocs()
	for b.Loop() {
		_ = kr.Sign(t)
	}
}
