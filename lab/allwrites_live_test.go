package lab

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
)

// TestDefaultWorkloadReportsHotVersions: on real MySQL the default write
// reports the version it gave its hot row (LAST_INSERT_ID(expr) in the OK
// packet), which the all-writes check needs, and a read returns them.
func TestDefaultWorkloadReportsHotVersions(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := topo.Primary()
	c, err := dialNode(ctx, p.Addr(), p.User, p.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := &DefaultWorkload{Database: "causallab_lab_hotack"}
	if err := w.Setup(ctx, c, 2, 2); err != nil {
		t.Fatal(err)
	}
	defer c.Execute(ctx, "DROP DATABASE causallab_lab_hotack")
	var got []int64
	for i, h := range []int{1, 1, 0, 1} {
		ack, err := w.Write(ctx, c, i%2, int64(i+1), h)
		if err != nil {
			t.Fatal(err)
		}
		if ack.GTID == "" {
			t.Errorf("write %d: no GTID", i)
		}
		got = append(got, ack.Hot)
	}
	if want := []int64{1, 2, 1, 3}; !slices.Equal(got, want) {
		t.Fatalf("hot versions acknowledged %v, want %v", got, want)
	}
	hot := make([]int64, 2)
	own, err := w.Read(ctx, c, 1, hot)
	if err != nil {
		t.Fatal(err)
	}
	if own != 4 || !slices.Equal(hot, []int64{1, 3}) {
		t.Fatalf("read own %d hot %v, want 4 [1 3]", own, hot)
	}
}
